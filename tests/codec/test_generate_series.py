"""Series generators whose empty projection DataFusion's serialisation drops, repaired."""

from __future__ import annotations

import pytest
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec import fields as F
from datafusion_distributed.codec import replace_subtree
from datafusion_distributed.codec.generate_series import repaired_series, series_schema
from datafusion_distributed.codec.wire import LEN, iter_fields
from datafusion_distributed.execution_plans.plan_node import PlanNode

SERIES = {
    "int": "generate_series(1, 20000)",
    "range": "range(3, 20000, 7)",
    "date": "generate_series(DATE '2020-01-01', DATE '2020-03-01', INTERVAL '1 day')",
    "timestamp": "generate_series(TIMESTAMP '2020-01-01', TIMESTAMP '2020-01-05', INTERVAL '1 hour')",
    "timestamp_with_zone": (
        "generate_series(TIMESTAMPTZ '2020-01-01T00:00:00Z', TIMESTAMPTZ '2020-01-05T00:00:00Z', INTERVAL '1 hour')"
    ),
}


def _session() -> SessionContext:
    ctx = SessionContext()
    ctx.sql("SET datafusion.execution.time_zone = 'Europe/Paris'").collect()
    return ctx


def _generator(ctx: SessionContext, sql: str) -> tuple[PlanNode, PlanNode]:
    root = PlanNode.from_plan(ctx.sql(sql).execution_plan())
    (node,) = [n for n in root.walk() if n.name == "LazyMemoryExec"]
    return root, node


def _fields(node: bytes) -> dict[int, bytes]:
    top = next(iter_fields(node))
    body = top.payload(node)
    return {f.number: f.payload(body) for f in iter_fields(body) if f.wire_type == LEN}


def _count(ctx: SessionContext, raw: bytes) -> int:
    plan = ExecutionPlan.from_bytes(ctx, raw)
    rows = [b.to_pyarrow() for p in range(plan.partition_count) for b in ctx.execute(plan, p)]
    return sum(r.column(0)[0].as_py() for r in rows if r.num_rows)


@pytest.mark.parametrize("series", SERIES.values(), ids=SERIES)
def test_schema_is_the_one_datafusion_writes_for_the_projected_column(series):
    """The schema written for a series that keeps its column pins every field number used."""
    ctx = _session()
    _, node = _generator(ctx, f"SELECT * FROM {series}")
    written = _fields(node.raw)
    (kind,) = [n for n in written if n != F.GENERATE_SERIES_SCHEMA]
    assert series_schema(kind, written[kind]) == written[F.GENERATE_SERIES_SCHEMA]


@pytest.mark.parametrize("series", SERIES.values(), ids=SERIES)
def test_count_over_a_series_rebuilds_from_repaired_bytes(series):
    ctx = _session()
    sql = f"SELECT count(*) FROM {series}"
    expected = ctx.sql(sql).to_arrow_table().column(0)[0].as_py()
    root, node = _generator(ctx, sql)
    assert _fields(node.raw)[F.GENERATE_SERIES_SCHEMA] == b""  # what DataFusion writes
    with pytest.raises(Exception, match="must match number of fields"):
        _count(ctx, root.raw)
    fixed = repaired_series(node.raw)
    assert fixed is not None
    assert _count(ctx, replace_subtree(root.raw, node.raw, fixed)) == expected


def test_series_that_keep_their_column_or_make_no_rows_are_left_alone():
    ctx = _session()
    for sql in (
        "SELECT value FROM generate_series(1, 10)",
        "SELECT count(*) FROM generate_series(NULL, 10)",  # a NULL argument: no rows, no batches
    ):
        _, node = _generator(ctx, sql)
        assert repaired_series(node.raw) is None, sql


def test_other_nodes_are_left_alone():
    ctx = _session()
    root = PlanNode.from_plan(ctx.sql("SELECT count(*) FROM (VALUES (1), (2)) v(x)").execution_plan())
    assert all(repaired_series(n.raw) is None for n in root.walk())
    assert repaired_series(b"\xff") is None
