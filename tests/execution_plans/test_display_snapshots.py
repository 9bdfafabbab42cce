"""The distributed plan of every TPC-H query, as displayed, compared with a reviewed snapshot.

Snapshots live in tests/snapshots/tpch/qNN.txt. After a deliberate change to the planner or
the display, rewrite them and review the diff:

    UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/execution_plans/test_display_snapshots.py

The data is TPC-H at SF 0.01 in 4 files per table; the display shows file base names only,
so the snapshots do not depend on where the data lives.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.execution_plans import display_distributed_plan
from datafusion_distributed.test_utils.local_check import plan_distributed, planning_context
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, register_tpch, tpch_query

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots" / "tpch"
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"
CONFIG = QueryPlanConfig(
    workers=3, partitions_per_task=2, bytes_per_partition=8 * 1024, broadcast_total_rows=None
)


def header(n: int) -> str:
    return (
        f"-- TPC-H q{n:02d}, SF 0.01 in 4 files per table: workers={CONFIG.workers}, "
        f"partitions_per_task={CONFIG.partitions_per_task}, bytes_per_partition=8 KiB\n"
    )


@pytest.fixture(scope="module")
def ctx(tpch_sf001):
    return planning_context(CONFIG, lambda c: register_tpch(c, tpch_sf001))


@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_display_snapshot(n, ctx, tpch_sf001):
    text = header(n) + display_distributed_plan(plan_distributed(ctx, tpch_query(n), CONFIG))
    assert str(tpch_sf001) not in text and str(tpch_sf001).lstrip("/") not in text
    assert "not found" not in text, "a scan or an input could not be placed in its stage"
    path = SNAPSHOTS / f"q{n:02d}.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.is_file(), f"{path.name} is missing: run with UPDATE_SNAPSHOTS=1 to write it"
    expected = path.read_text()
    if text != expected:
        import difflib

        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True), text.splitlines(keepends=True), "snapshot", "now"
            )
        )
        pytest.fail(f"the display of q{n:02d} changed (UPDATE_SNAPSHOTS=1 rewrites it):\n{diff}")
