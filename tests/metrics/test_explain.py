"""EXPLAIN ANALYZE, verbose, Graphviz and Mermaid renderings of distributed plans."""

from __future__ import annotations

import re

import pytest

from datafusion_distributed import DistributedConfig
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.execution_plans.stage import Stage
from datafusion_distributed.metrics.explain import executed_node
from datafusion_distributed.metrics.task_metrics import NodeMetrics
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, tpch_query

CONFIG = DistributedConfig(embedded_workers=3, bytes_per_partition=1024)


@pytest.fixture(scope="module")
def dctx(tpch_sf001, distributed_tpch):
    with distributed_tpch(tpch_sf001, config=CONFIG) as dctx:
        yield dctx


@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS)
def test_explain_analyze_renders_tpch(dctx, n):
    df = dctx.sql(tpch_query(n))
    text = df.explain_string(analyze=True)
    plan = df.distributed_plan()
    ran = df.metrics.plan_as_run or plan  # re-planned from its stages' sizes as it ran
    assert text.startswith("Query ")
    for stage in ran.stages:
        assert f"Stage {stage.id} " in text
    for decision in df.metrics.adaptations:
        if decision.folded_into is not None:
            assert f"adaptive: stage {decision.stage} runs inside stage {decision.folded_into}" in text
    # every stage ran and reports its totals; nodes carry metrics
    assert text.count("│ metrics: ") == len(ran.stages)
    assert "(stage did not run)" not in text
    assert "metrics=[output_rows=" in text
    # the final stage's rows are the result's rows
    rows = len(df.to_pylist())
    final = re.search(
        rf"Stage {plan.final.id} .*?\n(?:│ tasks:.*\n)?(?:│ adaptive:.*\n)*│ metrics: .*?output_rows=(\d+)",
        text,
    )
    assert final is not None and int(final.group(1)) == rows


def test_verbose_shows_each_task(dctx):
    df = dctx.sql("SELECT l_returnflag, count(*) FROM lineitem GROUP BY 1")
    text = df.explain_string(analyze=True, verbose=True)
    plan = df.distributed_plan()
    tasks = sum(len(df.metrics.stage(s.id).tasks) for s in plan.stages)
    assert len(re.findall(r"│   task \d+ on ", text)) == tasks
    assert "queue=" in text and "wall=" in text and "output_rows per task=[" in text


def test_sql_explain_analyze(dctx):
    table = dctx.sql("EXPLAIN ANALYZE SELECT count(*) FROM orders WHERE o_totalprice > 1000").to_pylist()
    assert [r["plan_type"] for r in table] == ["Plan with Metrics"]
    assert "metrics=[output_rows=" in table[0]["plan"]
    verbose = dctx.sql("explain analyze verbose SELECT count(*) FROM orders").to_pylist()[0]["plan"]
    assert " on grpc://" in verbose or " on coordinator" in verbose


def test_graphviz_and_mermaid(dctx):
    df = dctx.sql("SELECT o_orderpriority, count(*) FROM orders GROUP BY 1 ORDER BY 1")
    plan = df.distributed_plan()
    dot = df.explain_string(format="graphviz")
    assert dot.startswith("digraph distributed_plan {") and dot.rstrip().endswith("}")
    for stage in plan.stages:
        assert f"subgraph cluster_stage_{stage.id} " in dot
        for task in range(stage.task_count):
            assert f"s{stage.id}_t{task} [" in dot
        for inp in stage.inputs:
            assert f"lhead=cluster_stage_{stage.id}" in dot and f"ltail=cluster_stage_{inp.producer}" in dot
    mermaid = df.explain_string(format="mermaid")
    assert mermaid.startswith("flowchart BT")
    edges = sum(len(s.inputs) for s in plan.stages)
    assert len(re.findall(r"stage\d+ -- \".*\" --> stage\d+", mermaid)) == edges
    analyzed = df.explain_string(analyze=True, format="mermaid")
    assert " rows, " in analyzed
    with pytest.raises(ValueError, match="format"):
        df.explain_string(format="svg")


def test_metrics_are_found_by_path_where_the_executed_plan_has_the_stages_shape():
    def plan_node(name, *children):
        return PlanNode(name, name, 1, name.encode(), children)

    def executed(name, *children):
        return NodeMetrics(name, {"output_rows": len(name)}, children)

    shuffle = plan_node("RepartitionExec", plan_node("DataSourceExec"))
    stage = Stage(
        1,
        plan_node("ProjectionExec", plan_node("HashJoinExec", plan_node("FilterExec"), shuffle)),
        b"",
        (),
        (),
        None,
    )
    scan = executed("DataSourceExec")  # the input's scan stands where the shuffle was
    join = executed("HashJoinExec", executed("FilterExec"), scan)
    run = executed("ProjectionExec", join)
    assert executed_node(stage, (), run) is run
    assert executed_node(stage, (0,), run) is join
    assert executed_node(stage, (0, 1), run) is None  # another node there: no numbers
    assert executed_node(stage, (0, 1), run, at_input=True) is scan
    other = executed("ProjectionExec", executed("SortMergeJoinExec", executed("FilterExec"), scan))
    assert executed_node(stage, (0, 0), other) is None  # the path leads through another node
    short = executed("ProjectionExec", executed("HashJoinExec", executed("FilterExec")))
    assert executed_node(stage, (0, 0), short) is None  # its children cannot be matched
    assert executed_node(stage, (0,), None) is None
