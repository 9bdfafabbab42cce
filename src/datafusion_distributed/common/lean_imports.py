"""Import DataFusion without pandas, in the processes the library starts (its command line: workers
and the `sql` shell).

DataFusion 55's Python package builds a pyarrow scalar as it is imported
(`datafusion.functions.spark`), and pyarrow then imports pandas if it is installed: about 50 MB
and 0.2 s in every worker process, which never uses it. So pandas is held back while DataFusion
is imported. pyarrow remembers from then on that it found no pandas, and would convert pandas
objects as plain sequences (a categorical Series to strings instead of a dictionary array): to
keep a user's UDF that imports pandas later exactly as it would be otherwise, pyarrow is asked
to look for pandas again as soon as pandas is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

HELD_BACK = "pandas"


def import_datafusion_without_pandas() -> None:
    """Import `datafusion` with pandas held back (nothing to do if either is already imported)."""
    if "datafusion" in sys.modules or HELD_BACK in sys.modules:
        return
    held = _HoldBack()
    sys.meta_path.insert(0, held)
    try:
        import datafusion  # noqa: F401
    finally:
        sys.meta_path.remove(held)
    if held.asked and _installed(HELD_BACK):
        sys.meta_path.insert(0, _TellPyarrowOnImport())


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a finder may refuse it outright
        return False


class _HoldBack(importlib.abc.MetaPathFinder):
    """Answers that pandas is not installed, and records that it was asked for."""

    asked = False

    def find_spec(self, name: str, path=None, target=None) -> None:
        if name == HELD_BACK or name.startswith(HELD_BACK + "."):
            self.asked = True
            raise ModuleNotFoundError(f"{name} is held back while DataFusion is imported", name=name)
        return None


class _TellPyarrowOnImport(importlib.abc.MetaPathFinder):
    """Finds pandas the usual way, the first time it is imported, with a loader that has pyarrow
    look for pandas again once pandas is loaded; then steps aside."""

    def find_spec(self, name: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        if name != HELD_BACK or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenTellPyarrow(spec.loader)
        return spec


class _ThenTellPyarrow(importlib.abc.Loader):
    """pandas' own loader, followed by a call that makes pyarrow import pandas again."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader  # nothing later sees this wrapper
        import pyarrow

        pyarrow.table({}).to_pandas()  # pyarrow's check for pandas, which now finds it
