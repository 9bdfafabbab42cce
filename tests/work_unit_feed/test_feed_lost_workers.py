"""A worker SIGKILLed while it reads a feed: its units are handed out again, its partial output
is discarded, and the answer is the single-node one, every unit read exactly once."""

from __future__ import annotations

import sys
import threading
import time

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster, read_units
from datafusion_distributed.events.handlers import DistributedHandler, Event, EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed

# the workers are other processes: this module's functions travel by value, as a notebook's do
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = pa.schema([("unit", pa.int64()), ("k", pa.int64()), ("v", pa.float64())])
UNITS = 48
CONFIG = DistributedConfig(partitions_per_task=2, connect_timeout=10, liveness_timeout=3)
SQL = "SELECT k % 7 AS g, count(*) AS n, sum(v) AS s, count(DISTINCT unit) AS units FROM events GROUP BY 1"


def read(unit: int) -> pa.Table:
    time.sleep(0.03)  # so that units are still being read when the worker dies
    return pa.table(
        {"unit": [unit] * 5, "k": [unit * 10 + i for i in range(5)], "v": [unit / 3 + i for i in range(5)]}
    )


def expected() -> pa.Table:
    ctx = SessionContext()
    ctx.register_view("events", ctx.from_arrow(read_units(_feed(lambda: iter(range(UNITS))))))
    return ctx.sql(SQL).to_arrow_table()


def _feed(provider):
    from datafusion_distributed import WorkUnitFeed

    return WorkUnitFeed("events", provider, read, SCHEMA)


def _total_units(df) -> int:
    return sum(sum(per_task.values()) for per_task in df.metrics.feed_units.values())


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


def _restart_dead(cluster: LocalCluster) -> None:
    for index, process in enumerate(cluster.processes):
        if process.poll() is not None:
            cluster.restart(index)


def test_a_worker_killed_while_reading_units(cluster):
    killed = threading.Event()

    def provider():
        for unit in range(UNITS):
            if unit == UNITS // 3 and not killed.is_set():
                killed.set()
                threading.Thread(target=cluster.kill, args=(1,)).start()  # while tasks read
            yield unit

    lost = LostWorkers()
    with DistributedContext(SessionContext(), workers=cluster, config=CONFIG, handlers=[lost]) as dctx:
        dctx.register_feed("events", provider, read, SCHEMA, tasks=3)
        df = dctx.sql(SQL)
        try:
            got = df.to_arrow_table()
        finally:
            _restart_dead(cluster)
    assert killed.is_set() and lost.workers  # a task was running there, and was run again
    assert_tables_equal(got, expected(), sql=SQL)
    assert_ran_distributed(dctx)
    assert _total_units(df) == UNITS


class LostWorkers(DistributedHandler):
    """Records the workers a query found lost."""

    def __init__(self) -> None:
        self.workers: list[str] = []

    def on_event(self, event: Event) -> None:
        if event.kind is EventKind.WORKER_UNREACHABLE:
            self.workers.append(event.worker)


class KillAfterFeedStage(DistributedHandler):
    """Kills the worker of task 0 once the stage reading the feed has finished: its outputs
    are lost, and the task is rerun over the same units."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.killed = None

    def on_event(self, event: Event) -> None:
        if event.kind is EventKind.STAGE_FINISHED and event.stage == 0 and self.killed is None:
            worker = event.metrics.tasks[0].worker
            self.killed = self.cluster.get_urls().index(worker)
            self.cluster.kill(self.killed)


@pytest.mark.slow
def test_a_worker_killed_after_reading_its_units(cluster):
    handler = KillAfterFeedStage(cluster)
    with DistributedContext(SessionContext(), workers=cluster, config=CONFIG, handlers=[handler]) as dctx:
        dctx.register_feed("events", lambda: iter(range(UNITS)), read, SCHEMA, tasks=3)
        df = dctx.sql(SQL)
        try:
            got = df.to_arrow_table()
        finally:
            _restart_dead(cluster)
    assert handler.killed is not None
    assert_tables_equal(got, expected(), sql=SQL)
    assert_ran_distributed(df)
    assert _total_units(df) == UNITS


def test_a_worker_killed_while_its_tasks_run_rounds_over_parquet_files(cluster, tmp_path):
    paths = []
    for unit in range(UNITS):
        paths.append(str(tmp_path / f"unit-{unit}.parquet"))
        pq.write_table(read(unit).cast(SCHEMA), paths[-1])
    killed = threading.Event()

    def provider():
        for unit, path in enumerate(paths):
            if unit == UNITS // 3 and not killed.is_set():
                killed.set()
                threading.Thread(target=cluster.kill, args=(1,)).start()  # while tasks run rounds
            time.sleep(0.01)  # a listing call: the query outlasts the kill
            yield path

    lost = LostWorkers()
    with DistributedContext(SessionContext(), workers=cluster, config=CONFIG, handlers=[lost]) as dctx:
        dctx.register_feed("events", provider, "parquet", SCHEMA, tasks=3)
        df = dctx.sql(SQL)
        assert "run in rounds" in df.explain_string()
        try:
            got = df.to_arrow_table()
        finally:
            _restart_dead(cluster)
    assert killed.is_set() and lost.workers
    assert_tables_equal(got, expected(), sql=SQL)
    assert_ran_distributed(dctx)
    assert _total_units(df) == UNITS
