"""PlanNode.from_plan reads children's bytes out of their parent's bytes: it must give exactly
what DataFusion serialises for every node, whatever the node types and their arities."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec import children as layouts
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, register_tpch, tpch_query


def assert_same_bytes(node: PlanNode, plan: ExecutionPlan) -> int:
    """Every node's raw bytes equal DataFusion's own serialisation of that subtree; the count."""
    assert node.raw == plan.to_bytes(), f"bytes differ at {node.line}"
    children = plan.children()
    assert len(node.children) == len(children)
    return 1 + sum(assert_same_bytes(n, p) for n, p in zip(node.children, children, strict=True))


@pytest.fixture(scope="module")
def tpch_ctx(tpch_sf001):
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    register_tpch(ctx, tpch_sf001)
    return ctx


@pytest.mark.parametrize("number", TPCH_QUERY_NUMBERS)
def test_tpch_plans_read_the_bytes_datafusion_writes(tpch_ctx, number):
    plan = tpch_ctx.sql(tpch_query(number)).execution_plan()
    assert assert_same_bytes(PlanNode.from_plan(plan), plan) > 1


@pytest.fixture(scope="module")
def small_ctx(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan-node")
    for name in ("a", "b"):
        (root / name).mkdir()
        for f in range(3):
            pq.write_table(
                pa.table({"k": list(range(f * 10, f * 10 + 10)), "s": [f"row {i}" for i in range(10)]}),
                root / name / f"part-{f}.parquet",
            )
    ctx = SessionContext(SessionConfig().with_target_partitions(3))
    for name in ("a", "b"):
        ctx.register_parquet(name, str(root / name))
    return ctx


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k FROM a UNION ALL SELECT k FROM b",  # one repeated field, arity 2
        "SELECT k FROM a UNION ALL SELECT k FROM b UNION ALL SELECT k + 1 FROM a",  # arity 3
        "SELECT x.k FROM a x JOIN a y ON x.k = y.k",  # identical children
        "SELECT * FROM a CROSS JOIN b",
        "SELECT k, row_number() OVER (PARTITION BY s ORDER BY k) FROM a",
        "SELECT s, count(DISTINCT k) FROM a GROUP BY s ORDER BY s LIMIT 3",
        "SELECT * FROM a WHERE k IN (SELECT k FROM b WHERE k > 5)",
        "SELECT k FROM a EXCEPT SELECT k FROM b",
        "SELECT * FROM (VALUES (1), (2)) AS v(x)",
    ],
)
def test_plans_of_many_shapes_read_the_bytes_datafusion_writes(small_ctx, sql):
    plan = small_ctx.sql(sql).execution_plan()
    assert_same_bytes(PlanNode.from_plan(plan), plan)


def test_a_layout_that_does_not_fit_is_not_used():
    # A node whose children cannot be found as whole fields of its message: nothing learned.
    assert layouts.learn(b"\x0a\x02\x08\x01", [b"\x0a\x00"]) is None
    # Too few fields for a learned layout: no answer, so the caller serialises the children.
    assert layouts.read(b"\x0a\x00", (1, 1)) is None


def test_a_plan_is_serialised_once_when_its_node_kinds_are_known(tpch_ctx, monkeypatch):
    plan = tpch_ctx.sql(tpch_query(8)).execution_plan()
    PlanNode.from_plan(plan)  # learns the layouts of the kinds in this plan
    calls = []
    original = ExecutionPlan.to_bytes
    monkeypatch.setattr(ExecutionPlan, "to_bytes", lambda self: calls.append(1) or original(self))
    node = PlanNode.from_plan(plan)
    assert len(calls) == 1
    assert len(list(node.walk())) > 10
