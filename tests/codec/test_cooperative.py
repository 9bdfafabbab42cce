"""Wrapping plan subtrees in CooperativeExec: every copy once, nested ones included, and the
wrapped plan computes the same rows."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec.cooperative import wrap_cooperative
from datafusion_distributed.execution_plans.plan_node import PlanNode

# Two identical joins (the same bytes twice), each holding another join. (Hash joins differ
# in their bytes: each has its own dynamic filter.)
BRANCH = "SELECT a.k + b.k * 10 + c.k * 100 AS v FROM t a CROSS JOIN t b CROSS JOIN t c"
SQL = f"{BRANCH} UNION ALL {BRANCH}"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("coop")
    for part in range(2):
        pq.write_table(pa.table({"k": list(range(part * 5, part * 5 + 5))}), folder / f"p{part}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    return ctx


def _joins(node: PlanNode) -> list[PlanNode]:
    return [n for n in node.walk() if n.name.endswith("JoinExec")]


def _rows(ctx: SessionContext, plan: ExecutionPlan) -> list:
    return [
        row
        for p in range(plan.partition_count)
        for b in ctx.execute(plan, p)
        for row in b.to_pyarrow().to_pylist()
    ]


def test_every_copy_of_every_join_is_wrapped_once(ctx):
    original = ctx.sql(SQL).execution_plan()
    raw = original.to_bytes()
    joins = _joins(PlanNode.from_plan(original, raw))
    assert len(joins) == 4 and len({j.raw for j in joins}) < 4  # copies and nesting
    wrapped = ExecutionPlan.from_bytes(ctx, wrap_cooperative(raw, [j.raw for j in joins]))
    nodes = list(PlanNode.from_plan(wrapped).walk())
    parents = {id(c): n for n in nodes for c in n.children}
    assert len(_joins(nodes[0])) == 4
    assert all(parents[id(j)].name == "CooperativeExec" for j in _joins(nodes[0]))
    assert sum(n.name == "CooperativeExec" for n in nodes) == 4 + sum(
        n.name == "CooperativeExec" for n in PlanNode.from_plan(original).walk()
    )
    assert sorted(_rows(ctx, wrapped), key=str) == sorted(_rows(ctx, original), key=str)


def test_a_plan_that_is_a_join_is_wrapped_itself(ctx):
    join = _joins(PlanNode.from_plan(ctx.sql(SQL).execution_plan()))[0]
    wrapped = ExecutionPlan.from_bytes(ctx, wrap_cooperative(join.raw, [join.raw]))
    assert wrapped.display().startswith("CooperativeExec")
    assert PlanNode.from_plan(wrapped.children()[0]).name == join.name
