"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from datafusion import SessionContext
from hypothesis import HealthCheck, settings

from datafusion_distributed import DistributedContext
from datafusion_distributed.test_utils.distribution import LEDGER
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data

# Hypothesis profiles: "ci" (the default) keeps randomised tests bounded; run
# `HYPOTHESIS_PROFILE=thorough make test-all` to search harder.
settings.register_profile("ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _shows_how_compared_queries_ran(request: pytest.FixtureRequest):
    """Fail a test that compares answers (`assert_tables_equal`) without showing how its query
    ran (`assert_ran_distributed` or `assert_ran_on_one_node`): an answer equal to
    single-node proves nothing when the query quietly ran on one node. Tests whose answers
    come from no distributed run say so with the `not_a_distributed_run` mark."""
    compared, shown = LEDGER.compared, LEDGER.shown
    yield
    exempt = request.node.get_closest_marker("not_a_distributed_run") is not None
    if LEDGER.compared > compared and LEDGER.shown == shown and not exempt:
        pytest.fail(
            "the test compares answers but never shows how its query ran: call "
            "assert_ran_distributed (or assert_ran_on_one_node) from "
            "datafusion_distributed.test_utils.distribution",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def tpch_sf001() -> Path:
    """TPC-H at scale factor 0.01 (about 10 MB), 4 Parquet files per table; cached across runs."""
    return tpch_data(0.01, parts=4)


@pytest.fixture(scope="session")
def tpch_sf01() -> Path:
    """TPC-H at scale factor 0.1 (about 100 MB), 4 Parquet files per table; cached across runs."""
    return tpch_data(0.1, parts=4)


def _single_node(tpch: Path) -> SessionContext:
    ctx = SessionContext()
    register_tpch(ctx, tpch)
    return ctx


@pytest.fixture(scope="session")
def single_node_sf001(tpch_sf001: Path) -> SessionContext:
    """Single-node DataFusion over `tpch_sf001`: the answers distributed runs must match."""
    return _single_node(tpch_sf001)


@pytest.fixture(scope="session")
def single_node_sf01(tpch_sf01: Path) -> SessionContext:
    """Single-node DataFusion over `tpch_sf01`: the answers distributed runs must match."""
    return _single_node(tpch_sf01)


@pytest.fixture(scope="session")
def distributed_tpch() -> Callable[..., DistributedContext]:
    """Makes a DistributedContext over the TPC-H tables of a folder, registered in a new
    SessionContext: `with distributed_tpch(tpch_sf001, config=...) as dctx:`; the other
    arguments are DistributedContext's."""

    def make(tpch: Path, **context_args: Any) -> DistributedContext:
        return DistributedContext(_single_node(tpch), **context_args)

    return make


@pytest.fixture
def run_cli():
    """Run the command line (`python -m datafusion_distributed ...`), bounded, with `stdin` as
    its standard input (none by default)."""

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "datafusion_distributed", *args],
            capture_output=True,
            text=True,
            timeout=120,
            **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}),
        )

    return run
