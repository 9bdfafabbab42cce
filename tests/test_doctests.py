"""Every docstring example of the package runs and prints what it shows: one test per module
that has any, with the names DataFusion's own examples take as given (`DistributedContext`,
`col`, `lit`, `f` for functions, `pa`). A context an example opens is closed after it."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pyarrow as pa
import pytest
from datafusion import col, lit
from datafusion import functions as f

import datafusion_distributed
from datafusion_distributed import DistributedContext

MODULES = [
    module.name
    for module in pkgutil.walk_packages(datafusion_distributed.__path__, "datafusion_distributed.")
    if module.name != "datafusion_distributed.__main__"
]
WITH_EXAMPLES = [
    name
    for name in MODULES
    if any(t.examples for t in doctest.DocTestFinder().find(importlib.import_module(name)))
]


def test_the_package_has_docstring_examples_to_run():
    assert len(WITH_EXAMPLES) >= 15, WITH_EXAMPLES


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    names = {"DistributedContext": DistributedContext, "col": col, "lit": lit, "f": f, "pa": pa}
    for test in finder.find(module, globs={**vars(module), **names}):
        try:
            runner.run(test)
        finally:
            if isinstance(test.globs.get("dctx"), DistributedContext):
                test.globs["dctx"].close()
    assert runner.failures == 0, (
        f"{runner.failures} docstring example(s) of {name} failed (see the output above)"
    )
    assert runner.tries > 0
