"""Find headless Chromium and its WebDriver for the dashboard's browser test, installing
Debian's `chromium` and `chromium-driver` packages when they are missing and this machine can
(root, with apt-get); quiet unless it fails.

    python -m devtools.chromium          # find or install; prints the paths, or why not

Set DATAFUSION_DISTRIBUTED_NO_BROWSER_INSTALL=1 to only look, never install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

NO_INSTALL_ENV = "DATAFUSION_DISTRIBUTED_NO_BROWSER_INSTALL"
PACKAGES = ("chromium", "chromium-driver")
INSTALL_TIMEOUT = 600.0  # seconds for apt-get update and install together


@dataclass(frozen=True)
class Chromium:
    """Where the browser and its driver are."""

    browser: str
    driver: str


def find() -> Chromium | None:
    """Chromium and chromedriver on the PATH (or in /usr/bin), None when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if browser and driver:
        return Chromium(browser, driver)
    return None


def install() -> str | None:
    """Install Debian's packages; None on success, else why it could not."""
    if os.environ.get(NO_INSTALL_ENV):
        return f"{NO_INSTALL_ENV} is set"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root: install them with `sudo apt-get install chromium chromium-driver`"
    apt = shutil.which("apt-get")
    if apt is None:
        return "no apt-get on this machine: install Chromium and chromedriver on the PATH"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        for command in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", *PACKAGES]):
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                return f"`{' '.join(command[:2])}` failed: {' '.join(tail)}"
    except subprocess.TimeoutExpired:
        return f"apt-get did not finish within {INSTALL_TIMEOUT:.0f}s"
    return None


def find_or_install() -> Chromium | str:
    """Chromium and its driver, installed first when missing and possible; else a sentence
    saying why there is none (for a test to skip with)."""
    found = find()
    if found is not None:
        return found
    why = install()
    if why is not None:
        return f"headless Chromium is not installed and could not be: {why}"
    return find() or "apt-get installed Chromium, yet chromium or chromedriver is not on the PATH"


if __name__ == "__main__":
    result = find_or_install()
    if isinstance(result, str):
        print(result, file=sys.stderr)
        sys.exit(1)
    print(f"{result.browser}\n{result.driver}")
