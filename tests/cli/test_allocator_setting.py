"""Processes the command line starts hand freed memory back lazily (`common/allocator.py`):
mimalloc's setting is in place before DataFusion is imported, a value the user set is kept,
and a worker faults in far fewer fresh pages than one at mimalloc's own default."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, LocalCluster
from datafusion_distributed.common.allocator import DECOMMIT_VARIABLE, hand_back_lazily
from datafusion_distributed.test_utils.forced import FORCED_CONFIG
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query


def test_the_setting_is_a_default_the_environment_overrides():
    environ: dict[str, str] = {}
    hand_back_lazily(environ)
    assert environ == {DECOMMIT_VARIABLE: "0"}
    environ = {DECOMMIT_VARIABLE: "1"}
    hand_back_lazily(environ)
    assert environ == {DECOMMIT_VARIABLE: "1"}


@pytest.mark.parametrize("given, expected", [(None, "0"), ("1", "1")])
def test_the_command_line_sets_it_before_datafusion_is_imported(given, expected):
    env = {k: v for k, v in os.environ.items() if k != DECOMMIT_VARIABLE}
    if given is not None:
        env[DECOMMIT_VARIABLE] = given
    probe = (
        "import sys, os\n"
        "from datafusion_distributed.common import allocator\n"
        "real = allocator.hand_back_lazily\n"
        "seen = []\n"
        "allocator.hand_back_lazily = lambda: seen.append(real())\n"
        "import datafusion_distributed.cli\n"
        f"print(seen, os.environ[{DECOMMIT_VARIABLE!r}], 'datafusion' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["[True]", expected, "True"]


def _minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])


def _worker_faults(tpch: os.PathLike, runs: int) -> int:
    """Fresh pages the workers of a new LocalCluster faulted in over `runs` forced runs of q18."""
    with LocalCluster(2) as cluster:
        ctx = SessionContext()
        register_tpch(ctx, tpch)
        dctx = DistributedContext(ctx, workers=cluster, config=FORCED_CONFIG)
        for _ in range(2):  # the first runs fault their pages in either way
            dctx.sql(tpch_query(18)).to_arrow_table()
        before = sum(_minor_faults(p.pid) for p in cluster.processes)
        for _ in range(runs):
            dctx.sql(tpch_query(18)).to_arrow_table()
        return sum(_minor_faults(p.pid) for p in cluster.processes) - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_reuse_freed_pages_instead_of_faulting_them_in_again(tpch_sf01, monkeypatch):
    monkeypatch.setenv(DECOMMIT_VARIABLE, "1")  # mimalloc's own default, inherited by the workers
    eager = _worker_faults(tpch_sf01, runs=8)
    monkeypatch.delenv(DECOMMIT_VARIABLE)  # the library's
    lazy = _worker_faults(tpch_sf01, runs=8)
    # lazily freed pages are reused: 0.13-0.39 of the faults measured here,
    # against about as many (a ratio near 1) if the setting did not take effect
    assert lazy * 2 < eager, (lazy, eager)
