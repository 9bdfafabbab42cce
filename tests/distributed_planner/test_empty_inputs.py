"""An exchange its producers left empty: the consumer runs the boundary subtree reading nothing
under a limit of no row, not the producers' work again (`distributed_planner.empty_inputs`)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed import DistributedContext
from datafusion_distributed.distributed_planner.empty_inputs import no_rows_stand_in
from datafusion_distributed.events import DistributedHandler, EventKind
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.forced import forced_distribution


@pytest.fixture
def data(tmp_path) -> str:
    """Two Parquet files of `t` (k, v >= 0, s) and nothing else in their folder."""
    folder = tmp_path / "t"
    folder.mkdir()
    for i in range(2):
        keys = list(range(i, 200, 2))
        pq.write_table(
            pa.table({"k": keys, "v": [k * 10 for k in keys], "s": [f"s{k}" for k in keys]}),
            folder / f"{i}.parquet",
        )
    return str(folder)


def context(data: str) -> SessionContext:
    ctx = SessionContext(SessionConfig().with_target_partitions(2))
    ctx.register_parquet("t", data)
    ctx.register_record_batches("m", [[pa.record_batch({"k": [1, 3, 5], "w": [1.5, 2.5, 3.5]})]])
    return ctx


def rows_of(ctx: SessionContext, plan: ExecutionPlan) -> int:
    return sum(
        batch.to_pyarrow().num_rows
        for partition in range(plan.partition_count)
        for batch in ctx.execute(plan, partition)
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k",
        # over leaves that read nothing these would still make rows: the limit keeps them out
        "SELECT t.k, t.s FROM t LEFT ANTI JOIN m ON t.k = m.k",
        "SELECT count(*) AS n, max(s) AS top FROM t",
        "SELECT t.k, m.w FROM t JOIN m ON t.k = m.k ORDER BY t.k",
    ],
)
def test_the_stand_in_reads_nothing_and_keeps_the_schema_and_partitions(data, sql):
    ctx = context(data)
    plan = ctx.sql(sql).execution_plan()
    expected_rows = rows_of(ctx, ExecutionPlan.from_bytes(ctx, plan.to_bytes()))
    assert expected_rows > 0
    stand_in = no_rows_stand_in(PlanNode.from_plan(plan))
    assert stand_in is not None
    for name in os.listdir(data):  # it must not read them
        os.remove(os.path.join(data, name))
    decoded = ExecutionPlan.from_bytes(ctx, stand_in)
    assert decoded.partition_count == plan.partition_count
    rows = rows_of(ctx, decoded)
    assert rows == 0
    # the same operators as planned, so the same schema, under the limit
    assert operators(decoded)[0] == "LocalLimitExec"
    assert [op.removeprefix("  ") for op in operators(decoded)[1:]] == operators(plan)


def operators(plan: ExecutionPlan) -> list[str]:
    """The operators of `plan`, one per line of its display, with their depth."""
    return [line.split(":", 1)[0] for line in plan.display_indent().splitlines() if line.strip()]


def test_a_leaf_that_cannot_read_nothing_keeps_the_subtree_as_planned():
    ctx = SessionContext()
    plan = ctx.sql("SELECT value % 3 AS k, count(*) FROM generate_series(1, 10) GROUP BY 1").execution_plan()
    assert no_rows_stand_in(PlanNode.from_plan(plan)) is None


class DeleteFilesAfterStage(DistributedHandler):
    """Deletes the table's files once the stage that scans them has finished: a consumer that
    computed the producers' work again would then fail to read them."""

    def __init__(self, folder: str):
        self.folder = folder
        self.deleted = False

    def on_event(self, event) -> None:
        if event.kind is EventKind.STAGE_FINISHED and not self.deleted:
            for name in os.listdir(self.folder):
                os.remove(os.path.join(self.folder, name))
            self.deleted = True


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, count(*) AS n FROM t WHERE length(s) > 100 GROUP BY k",  # shuffle
        "SELECT k, s FROM t WHERE length(s) > 100 ORDER BY k",  # merge
        "SELECT k, s FROM t WHERE length(s) > 100 LIMIT 5",  # coalesce
    ],
)
def test_a_consumer_of_an_empty_exchange_does_not_scan_again(data, sql):
    expected = context(data).sql(sql).to_arrow_table()
    deleter = DeleteFilesAfterStage(data)
    forced = forced_distribution()
    with DistributedContext(
        context(data), config=forced["config"], handlers=[*forced["handlers"], deleter]
    ) as dctx:
        df = dctx.sql(sql)
        got = df.to_arrow_table()
    assert deleter.deleted, "no stage finished before the result: nothing ran distributed"
    assert got.num_rows == 0
    assert_tables_equal(got, expected, sql=sql)
    assert_ran_distributed(df)


@pytest.mark.parametrize(
    ("sql", "distributed"),
    [
        (
            "SELECT t.k, m.w FROM m LEFT JOIN (SELECT * FROM t WHERE length(s) > 100) t ON t.k = m.k ORDER BY m.k",
            True,
        ),
        ("SELECT count(*) AS n, sum(v) AS total FROM t WHERE length(s) > 100", True),
        (
            "SELECT k, count(*) AS n FROM (SELECT k FROM t WHERE length(s) > 100 UNION ALL SELECT k FROM m) GROUP BY k ORDER BY k",
            True,
        ),
        # a null-aware anti join emits its build side's unmatched rows: every task would emit
        # them, so its stage is never split (and no exchange is there to be empty)
        ("SELECT m.k FROM m WHERE m.k NOT IN (SELECT k FROM t WHERE length(s) > 100) ORDER BY 1", False),
    ],
)
def test_answers_over_empty_exchanges_equal_single_node(data, sql, distributed):
    expected = context(data).sql(sql).to_arrow_table()
    with DistributedContext(context(data), **forced_distribution()) as dctx:
        df = dctx.sql(sql)
        got = df.to_arrow_table()
    assert_tables_equal(got, expected, sql=sql)
    (assert_ran_distributed if distributed else assert_ran_on_one_node)(df)
