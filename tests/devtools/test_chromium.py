"""devtools/chromium.py: the browser test's Chromium is found on the PATH; where it is missing and
cannot be installed, a sentence says why (the test skips with it) and nothing is run."""

from __future__ import annotations

import shutil
import subprocess

from devtools import chromium


def test_found_on_the_path(monkeypatch):
    paths = {"chromium": "/opt/c/chromium", "chromedriver": "/opt/c/chromedriver"}
    monkeypatch.setattr(shutil, "which", paths.get)
    assert chromium.find() == chromium.Chromium("/opt/c/chromium", "/opt/c/chromedriver")


def test_missing_and_not_to_be_installed_says_why_without_running_anything(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    monkeypatch.setenv(chromium.NO_INSTALL_ENV, "1")
    why = chromium.find_or_install()
    assert isinstance(why, str) and chromium.NO_INSTALL_ENV in why and "not installed" in why


def test_without_root_or_apt_it_says_how(monkeypatch):
    monkeypatch.delenv(chromium.NO_INSTALL_ENV, raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    monkeypatch.setattr(chromium.os, "geteuid", lambda: 1000)
    assert "apt-get install chromium chromium-driver" in chromium.install()
    monkeypatch.setattr(chromium.os, "geteuid", lambda: 0)
    assert "no apt-get" in chromium.install()
