"""Cancelling a query (cancel(), Ctrl-C, a timeout) returns promptly and stops its remote tasks."""

from __future__ import annotations

import _thread
import logging
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext, udf

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    QueryCancelled,
    QueryFailed,
    QueryTimedOut,
)

# Every task reads 25 batches and the UDF sleeps 0.3 s on each: a query takes about 8 s.
SLOW_SQL = "SELECT slow(k) AS v FROM t"
CONFIG = DistributedConfig(bytes_per_partition=1024)


def slow_udf():
    def slow(values: pa.Array) -> pa.Array:
        time.sleep(0.3)
        return values

    return udf(slow, [pa.int64()], pa.int64(), "volatile", "slow")


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slow")
    for p in range(4):
        table = pa.table({"k": pa.array(range(p * 100_000, (p + 1) * 100_000), pa.int64())})
        pq.write_table(table, folder / f"p{p}.parquet", row_group_size=4096)
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    ctx.register_udf(slow_udf())
    return ctx


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(2) as c:
        yield c


def _when_running(cluster, action) -> threading.Thread:
    """Run `action` once tasks have written their first output (bounded wait)."""

    def wait_then_act():
        deadline = time.monotonic() + 20
        while not cluster.spool_files() and time.monotonic() < deadline:
            time.sleep(0.05)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def _assert_spool_empties(cluster, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while cluster.spool_files() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.spool_files() == []


def test_cancel_from_another_thread_stops_the_query_and_its_tasks(ctx, cluster):
    with DistributedContext(ctx, workers=cluster, config=CONFIG) as dctx:
        df = dctx.sql(SLOW_SQL)
        cancelled_at = []
        thread = _when_running(cluster, lambda: (cancelled_at.append(time.monotonic()), df.cancel()))
        with pytest.raises(QueryCancelled, match="the query was cancelled") as info:
            df.to_arrow_table()
        assert not isinstance(info.value, QueryTimedOut) and not isinstance(info.value, QueryFailed)
        thread.join()
        assert time.monotonic() - cancelled_at[0] < 3  # a task stops at its next batch (0.3 s)
        _assert_spool_empties(cluster)
        assert dctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 400_000}]
        assert df.cancel() is False  # nothing running any more


def test_a_query_timeout_cancels_the_query(ctx, cluster):
    config = DistributedConfig(bytes_per_partition=1024, query_timeout=1.0)
    with DistributedContext(ctx, workers=cluster, config=config) as dctx:
        started = time.monotonic()
        with pytest.raises(QueryTimedOut, match=r"longer than its timeout of 1s"):
            dctx.sql(SLOW_SQL).to_arrow_table()
        assert time.monotonic() - started < 4
        _assert_spool_empties(cluster)
        assert dctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 400_000}]


def test_ctrl_c_stops_the_remote_tasks(ctx, cluster):
    with DistributedContext(ctx, workers=cluster, config=CONFIG) as dctx:
        df = dctx.sql(SLOW_SQL)
        interrupted_at = []
        thread = _when_running(
            cluster, lambda: (interrupted_at.append(time.monotonic()), _thread.interrupt_main())
        )
        with pytest.raises(KeyboardInterrupt):
            for _ in df.execute_stream():
                pass
        thread.join()
        assert time.monotonic() - interrupted_at[0] < 3
        _assert_spool_empties(cluster)


def test_a_cancelled_task_is_logged_as_a_cancel_not_a_failure(ctx, caplog):
    caplog.set_level(logging.DEBUG, logger="datafusion_distributed.worker")
    with DistributedContext(ctx, config=CONFIG) as dctx:  # the embedded cluster: workers log here
        df = dctx.sql(SLOW_SQL)
        thread = _when_running(dctx._cluster, df.cancel)
        with pytest.raises(QueryCancelled):
            df.to_arrow_table()
        thread.join()

        def worker_lines(part: str = "") -> list[logging.LogRecord]:
            lines = [r for r in caplog.records if r.name.startswith("datafusion_distributed.worker")]
            return [r for r in lines if part in r.getMessage()]

        deadline = time.monotonic() + 20  # before the workers stop: every task has ended
        while len(worker_lines(" failed: ") + worker_lines(" cancelled: ")) < len(
            worker_lines("running query")
        ):
            assert time.monotonic() < deadline, [r.getMessage() for r in worker_lines()]
            time.sleep(0.05)
    cancels = worker_lines(" cancelled: ")
    assert len(cancels) == len(worker_lines("running query")) > 0
    assert all(r.levelno == logging.DEBUG and "the query was cancelled" in r.getMessage() for r in cancels)
    assert not [r.getMessage() for r in worker_lines() if r.levelno >= logging.WARNING]
