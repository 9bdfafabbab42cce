"""The `Examples:` of the dashboard's modules run."""

from __future__ import annotations

import doctest

import pytest

from datafusion_distributed.common import memory
from datafusion_distributed.dashboard import access, tables


@pytest.mark.parametrize("module", [access, tables, memory])
def test_docstring_examples_run(module) -> None:
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    for test in finder.find(module):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0
