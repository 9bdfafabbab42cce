"""Installers of user extensions for the tests, importable by worker processes by name
(`"tests.support.extensions:install_extra_functions"`), and the example extension crate
(examples/extension_sample) built for them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from datafusion import SessionContext, udaf

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CRATE = "extension-sample"
EXAMPLE_MODULE = "extension_sample"


def install_extra_functions(ctx: SessionContext) -> None:
    """Register every aggregate of `datafusion-extra-functions` (mode, skewness, ...) on `ctx`."""
    import datafusion_extra_functions as extra

    for name in extra.list_functions():
        ctx.register_udaf(udaf(extra.udaf_by_name(name)))


def cargo_target_dir() -> Path:
    """Cargo's build folder, as the Makefile sets it (outside the clone, shared with its builds)."""
    given = os.environ.get("CARGO_TARGET_DIR")
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "datafusion-distributed" / "cargo-target"


def build_example_extension(into: Path) -> Path:
    """Compile the example extension crate (release, its Python module) and put the module in
    the folder `into`, importable as `extension_sample` once `into` is on the path."""
    target = cargo_target_dir()
    subprocess.run(
        ["cargo", "build", "--quiet", "--release", "--locked", "-p", EXAMPLE_CRATE, "--features", "python"],
        cwd=ROOT,
        env={**os.environ, "CARGO_TARGET_DIR": str(target)},
        check=True,
        timeout=1200,
    )
    built = target / "release" / f"lib{EXAMPLE_MODULE}.so"
    shutil.copyfile(built, into / f"{EXAMPLE_MODULE}.abi3.so")
    return into
