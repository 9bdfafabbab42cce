"""LocalCluster changing while queries run: a rolling restart of every worker fails no query,
changes no answer, loses no worker and reruns no task; workers added mid-query take the tasks
of its later stages; workers scaled away drain and exit 0.

The workers share nothing (as on separate machines), so a replaced worker's outputs can only be
read from it while it drains."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.events import EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import FORCED_CONFIG
from datafusion_distributed.test_utils.recorder import EventRecorder
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query

CONFIG = DistributedConfig(partitions_per_task=2, bytes_per_partition=64 * 1024, worker_refresh_seconds=0.0)
# every stage split over the workers, none run in the coordinator: later stages have tasks to give
SPLIT = dataclasses.replace(FORCED_CONFIG, worker_refresh_seconds=0.0)
QUERIES = [1, 3, 5, 9, 18]


class QueryLoop:
    """Runs TPC-H queries one after another on a thread until stopped, checking each answer
    against single-node DataFusion; keeps every event and error."""

    def __init__(self, cluster, tpch, single_node):
        self.cluster, self.tpch, self.single_node = cluster, tpch, single_node
        self.recorder = EventRecorder()
        self.errors: list[BaseException] = []
        self.done: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        ctx = SessionContext()
        register_tpch(ctx, self.tpch)
        with DistributedContext(ctx, workers=self.cluster, config=CONFIG, handlers=[self.recorder]) as dctx:
            i = 0
            while not self.stop.is_set():
                n = QUERIES[i % len(QUERIES)]
                i += 1
                try:
                    df = dctx.sql(tpch_query(n))
                    got = df.to_arrow_table()
                    want = self.single_node.sql(tpch_query(n)).to_arrow_table()
                    assert_tables_equal(got, want, sql=tpch_query(n))
                    assert_ran_distributed(df)
                    self.done.append(n)
                except Exception as exc:  # reported by the test
                    self.errors.append(exc)

    def __enter__(self) -> QueryLoop:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(300)

    def count(self, kind: EventKind) -> int:
        return sum(1 for e in self.recorder.events if e.kind is kind)


def wait_for_queries(loop: QueryLoop, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    target = len(loop.done) + n
    while len(loop.done) < target and not loop.errors and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_rolling_restart_of_every_worker_costs_no_query_anything(tpch_sf001, single_node_sf001):
    with LocalCluster(3, share_spools=False, drain_timeout=20) as cluster:
        first = list(cluster.urls)
        with QueryLoop(cluster, tpch_sf001, single_node_sf001) as loop:
            wait_for_queries(loop, 1)
            codes = []
            for i in range(3):
                codes.append(cluster.replace(i))
                wait_for_queries(loop, 1)  # a query runs on the new worker before the next goes
        assert loop.errors == []
        assert codes == [0, 0, 0]
        assert not set(first) & set(cluster.urls)
        assert len(loop.done) >= 4
        assert loop.recorder.lost() == []
        assert loop.count(EventKind.TASK_FAILED) == 0
        assert not [e for e in loop.recorder.events if e.kind is EventKind.TASK_STARTED and e.attempt]


def test_workers_added_mid_query_take_its_later_stages_and_scaling_down_drains(tpch_sf001, single_node_sf001):
    with LocalCluster(2, share_spools=False, drain_timeout=20) as cluster:
        ctx = SessionContext()
        register_tpch(ctx, tpch_sf001)
        recorder = EventRecorder()
        added: list[str] = []
        at: list[int] = []

        class ScaleUpAfterFirstStage:
            def on_event(self, event):
                if event.kind is EventKind.STAGE_FINISHED and not at:
                    before = set(cluster.urls)
                    cluster.scale(4)
                    added.extend(set(cluster.urls) - before)
                    at.append(len(recorder.events))

        handlers = [recorder, ScaleUpAfterFirstStage()]
        with DistributedContext(ctx, workers=cluster, config=SPLIT, handlers=handlers) as dctx:
            sql = tpch_query(5)
            assert_tables_equal(
                dctx.sql(sql).to_arrow_table(), single_node_sf001.sql(sql).to_arrow_table(), sql=sql
            )
            assert_ran_distributed(dctx)
            assert len(added) == 2 and len(cluster.urls) == 4
            later = {e.worker for e in recorder.events[at[0] :] if e.kind is EventKind.TASK_STARTED}
            assert later & set(added), later
            assert cluster.scale(2) == [0, 0]
            assert cluster.urls == [u for u in cluster.urls if u not in added] and len(cluster.urls) == 2
            assert_tables_equal(
                dctx.sql(sql).to_arrow_table(), single_node_sf001.sql(sql).to_arrow_table(), sql=sql
            )
            assert_ran_distributed(dctx)
        with pytest.raises(ValueError, match="at least one worker"):
            cluster.scale(0)
