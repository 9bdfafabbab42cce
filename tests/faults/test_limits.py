"""A worker's spool quota and memory limit fail tasks with clear errors, and free what they held."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    EmbeddedCluster,
    LocalCluster,
    QueryFailed,
)

CONFIG = DistributedConfig(bytes_per_partition=64 * 1024)
JOIN = "SELECT a.k % 7 AS g, count(*) AS n FROM t a JOIN t b ON a.k = b.k GROUP BY 1 ORDER BY 1"
GROUPS = "SELECT k % 5 AS g, count(*) AS n FROM t GROUP BY 1 ORDER BY 1"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("limits")
    for p in range(4):
        keys = list(range(p * 50_000, (p + 1) * 50_000))
        pq.write_table(pa.table({"k": keys, "s": [f"value-{i}" for i in keys]}), folder / f"p{p}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    return ctx


def test_spool_quota_fails_a_task_clearly_and_frees_on_release(ctx):
    with LocalCluster(2, worker_args=["--spool-quota-bytes", "100000"]) as cluster:
        with DistributedContext(ctx, workers=cluster, config=CONFIG) as dctx:
            with pytest.raises(QueryFailed, match="spool quota exceeded.*past its quota of 100000") as info:
                dctx.sql("SELECT s, count(*) FROM t GROUP BY s").to_pylist()
            assert "attempts" not in str(info.value)  # the query's own size: not retried
            for _ in range(3):  # a query that fits runs again and again: released outputs are freed
                assert dctx.sql(GROUPS).to_pylist() == [{"g": g, "n": 40_000} for g in range(5)]
        assert cluster.spool_files() == []


def test_quota_counts_outputs_until_their_query_is_released(ctx):
    with EmbeddedCluster(2, spool_quota_bytes=10_000_000) as cluster:
        with DistributedContext(ctx, workers=cluster, config=CONFIG) as dctx:
            stream = dctx.sql(JOIN).execute_stream()
            next(stream)  # the stages ran; their outputs are held until the query ends
            assert sum(w.spool.used_bytes() for w in cluster.workers) > 0
            stream.close()
        assert [w.spool.used_bytes() for w in cluster.workers] == [0, 0]
        assert cluster.spool_files() == []


def test_memory_limit_fails_a_task_clearly(ctx):
    with EmbeddedCluster(2, memory_limit_bytes=1_000_000) as cluster:
        with DistributedContext(ctx, workers=cluster, config=CONFIG) as dctx:
            with pytest.raises(
                QueryFailed, match=r"memory limit exceeded \(the worker's limit is 1000000 bytes\)"
            ):
                dctx.sql(JOIN).to_pylist()
        assert cluster.spool_files() == []
    with EmbeddedCluster(2, memory_limit_bytes=256_000_000) as cluster:
        with DistributedContext(ctx, workers=cluster, config=CONFIG) as dctx:
            assert sum(r["n"] for r in dctx.sql(JOIN).to_pylist()) == 200_000


def test_tasks_carrying_the_users_settings_keep_the_workers_memory_limit(ctx):
    """A task with settings runs in a copy of the worker's session, which shares its memory pool."""
    zoned = SessionContext()
    zoned.sql("SET datafusion.execution.time_zone = '+05:00'")
    zoned.register_table("t", ctx.table("t"))
    with EmbeddedCluster(2, memory_limit_bytes=1_000_000) as cluster:
        with DistributedContext(zoned, workers=cluster, config=CONFIG) as dctx:
            assert dctx.sql(JOIN).distributed_plan().task_settings
            with pytest.raises(
                QueryFailed, match=r"memory limit exceeded \(the worker's limit is 1000000 bytes\)"
            ):
                dctx.sql(JOIN).to_pylist()


def test_memory_limit_needs_a_hook_that_takes_the_runtime(tmp_path):
    from datafusion_distributed import FlightWorker

    with pytest.raises(ValueError, match="accepts a `runtime` keyword"):
        FlightWorker(
            str(tmp_path),
            session_builder=lambda config: SessionContext(config),
            memory_limit_bytes=1 << 20,
            auth_token="t",
        )


def test_a_worker_builds_one_session_for_all_its_tasks(ctx):
    """The hook runs once per worker, so a memory limit bounds the worker, not each task."""
    built = []

    def hook(config, runtime=None):
        built.append(runtime)
        return SessionContext(config, runtime)

    with EmbeddedCluster(2, session_builder=hook, memory_limit_bytes=256_000_000) as cluster:
        with DistributedContext(ctx, workers=cluster, config=CONFIG) as dctx:
            for _ in range(3):
                assert sum(r["n"] for r in dctx.sql(JOIN).to_pylist()) == 200_000
            tasks = sum(len(s.tasks) for s in dctx.sql(JOIN).distributed_plan().stages[:-1])
    assert tasks >= 2  # every run sent several tasks to the two workers
    assert len(built) == 2 and all(runtime is not None for runtime in built)
