"""The user's DataFusion execution settings reach every task: answers that read them while they
run (the time zone) are single-node DataFusion's, on workers and in the coordinator's head stage,
and two contexts with different settings sharing a cluster never see each other's."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, EmbeddedCluster, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import forced_distribution

# to_unixtime reads a string without an offset in the time zone of the session it runs in.
ON_WORKERS = "SELECT k, to_unixtime(s) AS seconds, to_timestamp(k) AS at FROM t WHERE k % 7 = 0 ORDER BY k"
# The final aggregate has one partition: it and the projection above it run in the head stage.
IN_THE_HEAD = "SELECT to_unixtime(max(s)) AS latest, count(*) AS n FROM t WHERE k % 3 = 0"
GROUPS = "SELECT k % 5 AS g, count(*) AS n, max(to_unixtime(s)) AS latest FROM t GROUP BY 1 ORDER BY 1"


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory):
    """A table `t` of 400 rows in four Parquet files: a key and a local time without an offset."""
    folder = tmp_path_factory.mktemp("times")
    for part in range(4):
        keys = range(part * 100, part * 100 + 100)
        times = [f"2024-01-{1 + k % 28:02d} {k % 24:02d}:00:00" for k in keys]
        pq.write_table(pa.table({"k": list(keys), "s": times}), folder / f"p{part}.parquet")
    return folder


def _ctx(table_dir, *statements: str) -> SessionContext:
    ctx = SessionContext()
    for statement in statements:
        ctx.sql(statement).collect()
    ctx.register_parquet("t", str(table_dir))
    return ctx


def _zone(zone: str) -> str:
    return f"SET datafusion.execution.time_zone = '{zone}'"


@pytest.fixture(scope="module")
def embedded():
    with EmbeddedCluster(2) as cluster:
        yield cluster


def _assert_single_nodes(dctx: DistributedContext, ctx: SessionContext, query: str) -> None:
    df = dctx.sql(query)
    assert df.distributed_plan().is_distributed
    actual, expected = df.to_arrow_table(), ctx.sql(query).to_arrow_table()
    assert actual.schema == expected.schema  # time zones included
    assert_tables_equal(actual, expected)
    assert_ran_distributed(df)


@pytest.mark.parametrize("query", [ON_WORKERS, IN_THE_HEAD, GROUPS])
def test_the_time_zone_reaches_the_tasks(embedded, table_dir, query):
    ctx = _ctx(table_dir, _zone("+05:00"))
    with DistributedContext(ctx, workers=embedded, **forced_distribution()) as dctx:
        _assert_single_nodes(dctx, ctx, query)
        plan = dctx.sql(query).distributed_plan()
    assert plan.task_settings == (("datafusion.execution.time_zone", "+05:00"),)


def test_a_time_zone_set_through_the_distributed_context_reaches_the_tasks(embedded, table_dir):
    ctx = _ctx(table_dir)
    with DistributedContext(ctx, workers=embedded, **forced_distribution()) as dctx:
        utc = dctx.sql(ON_WORKERS).to_pylist()
        dctx.sql(_zone("-03:30"))
        _assert_single_nodes(dctx, ctx, ON_WORKERS)
        assert dctx.sql(ON_WORKERS).to_pylist() != utc  # the setting changes this answer


def test_contexts_with_different_time_zones_share_a_cluster_without_leaking(embedded, table_dir):
    east, west, plain = _ctx(table_dir, _zone("+05:00")), _ctx(table_dir, _zone("-08:00")), _ctx(table_dir)
    contexts = [DistributedContext(c, workers=embedded, **forced_distribution()) for c in (east, west, plain)]
    answers = set()
    for _ in range(2):  # in turn, twice: a worker's cached sessions serve each its own settings
        for dctx, ctx in zip(contexts, (east, west, plain), strict=True):
            _assert_single_nodes(dctx, ctx, ON_WORKERS)
            answers.add(str(dctx.sql(ON_WORKERS).to_pylist()))
    assert len(answers) == 3
    for dctx in contexts:
        dctx.close()


def test_batch_size_travels_and_changes_no_answer(embedded, table_dir):
    ctx = _ctx(table_dir, "SET datafusion.execution.batch_size = 7")
    with DistributedContext(ctx, workers=embedded, **forced_distribution()) as dctx:
        assert dctx.sql(GROUPS).distributed_plan().task_settings == (
            ("datafusion.execution.batch_size", "7"),
        )
        for query in (ON_WORKERS, GROUPS):
            _assert_single_nodes(dctx, ctx, query)


def test_settings_the_library_sets_for_tasks_do_not_travel(embedded, table_dir):
    ctx = _ctx(
        table_dir,
        "SET datafusion.execution.target_partitions = 3",
        "SET datafusion.execution.enable_file_stream_work_stealing = true",
        "SET datafusion.optimizer.max_passes = 2",  # planning only: acts on the coordinator
    )
    with DistributedContext(ctx, workers=embedded, **forced_distribution()) as dctx:
        assert dctx.sql(GROUPS).distributed_plan().task_settings == ()
        _assert_single_nodes(dctx, ctx, GROUPS)


def test_the_time_zone_reaches_worker_processes(table_dir):
    ctx = _ctx(table_dir, _zone("+05:00"))
    with (
        LocalCluster(2) as cluster,
        DistributedContext(ctx, workers=cluster, **forced_distribution()) as dctx,
    ):
        for query in (ON_WORKERS, IN_THE_HEAD):
            _assert_single_nodes(dctx, ctx, query)
