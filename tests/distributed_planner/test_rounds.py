"""Which stage plans may run in rounds over their feed scan: only those whose output over a
split of the feed's units is the union of their outputs over the parts."""

from __future__ import annotations

import pytest

from datafusion_distributed.distributed_planner.rounds import runs_in_rounds
from datafusion_distributed.execution_plans.plan_node import PlanNode


def node(line: str, *children: PlanNode) -> PlanNode:
    return PlanNode(line.split(":")[0], line, 1, line.encode(), children)


def feed() -> PlanNode:
    return node("DataSourceExec: file_groups={4 groups}, projection=[a, b], file_type=arrow")


def table() -> PlanNode:
    return node("DataSourceExec: file_groups={2 groups}, projection=[a, c], file_type=parquet")


def join(join_type: str, left: PlanNode, right: PlanNode) -> PlanNode:
    return node(f"HashJoinExec: mode=Partitioned, join_type={join_type}, on=[(a@0, a@0)]", left, right)


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda f: f, True),
        (
            lambda f: node(
                "RepartitionExec: partitioning=Hash([a@0], 4), input_partitions=4",
                node("FilterExec: a@0 > 1", f),
            ),
            True,
        ),
        (lambda f: node("AggregateExec: mode=Partial, gby=[a@0 as a], aggr=[count(1)]", f), True),
        (lambda f: node("AggregateExec: mode=Final, gby=[a@0 as a], aggr=[count(1)]", f), False),
        (
            lambda f: node("AggregateExec: mode=Partial, gby=[a@0 as a], aggr=[], ordering_mode=Sorted", f),
            False,
        ),
        (lambda f: node("SortExec: expr=[a@0 ASC], preserve_partitioning=[true]", f), False),
        (lambda f: node("CoalescePartitionsExec: fetch=3", f), False),
        (lambda f: node("GlobalLimitExec: skip=0, fetch=3", f), False),
        (
            lambda f: node(
                "RepartitionExec: partitioning=Hash([a@0], 4), input_partitions=4, preserve_order=true", f
            ),
            False,
        ),
        (lambda f: node("ProjectionExec: expr=[random() as r, a@0 as a]", f), False),
        (lambda f: node("UnionExec", f, table()), False),
        (lambda f: join("Inner", table(), f), True),
        (lambda f: join("Inner", f, table()), True),
        (lambda f: join("Left", f, table()), True),
        (lambda f: join("Left", table(), f), False),
        (lambda f: join("RightSemi", table(), f), True),
        (lambda f: join("Full", f, table()), False),
        (lambda f: join("Inner", f, node("GlobalLimitExec: skip=0, fetch=3", table())), False),
        (lambda f: node("CrossJoinExec", table(), f), True),
        (lambda f: node("SortMergeJoin: join_type=Inner, on=[(a@0, a@0)]", f, table()), False),
    ],
    ids=[
        "the-scan",
        "filter-shuffle",
        "partial-aggregate",
        "final-aggregate",
        "sorted-partial-aggregate",
        "sort",
        "fetch",
        "limit",
        "order-preserving-shuffle",
        "volatile",
        "union-with-a-table",
        "inner-probe",
        "inner-build",
        "left-join-keeping-the-feed",
        "left-join-padding-the-feed",
        "right-semi",
        "full",
        "a-limited-other-side",
        "cross",
        "sort-merge",
    ],
)
def test_runs_in_rounds(build, expected):
    scan = feed()
    assert runs_in_rounds(build(scan), scan, set()) is expected


def test_another_stages_output_is_read_the_same_each_round():
    scan, other = feed(), node("RepartitionExec: partitioning=Hash([a@0], 4), input_partitions=2", table())
    plan = join("Inner", other, scan)
    assert runs_in_rounds(plan, scan, {id(other)})
    limited = node("GlobalLimitExec: skip=0, fetch=3", table())  # cut off: computed once, read as written
    assert runs_in_rounds(join("Inner", limited, scan), scan, {id(limited)})
