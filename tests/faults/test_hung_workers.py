"""A worker that stops answering (frozen with SIGSTOP) costs its query the liveness timeout, not
the task timeout: it is treated as lost, its tasks rerun elsewhere, its outputs are recomputed."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.events import EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query

LIVENESS_TIMEOUT = 2.0
TASK_TIMEOUT = 120.0  # far above what the query may take: waiting for it is the bug
CONFIG = DistributedConfig(
    partitions_per_task=2,
    bytes_per_partition=256 * 1024,
    connect_timeout=10,
    task_timeout=TASK_TIMEOUT,
    liveness_timeout=LIVENESS_TIMEOUT,
)


class FreezeAtStage:
    """Freezes (SIGSTOP) the worker the first task of `stage` is sent to, just before it is sent,
    and records the workers reported unreachable."""

    def __init__(self, cluster: LocalCluster, stage: int):
        self.pids = dict(zip(cluster.get_urls(), (p.pid for p in cluster.processes), strict=True))
        self.stage = stage
        self.frozen: list[int] = []
        self.frozen_url: str | None = None
        self.unreachable: list[str] = []
        self._lock = threading.Lock()

    def on_event(self, event) -> None:
        if event.kind is EventKind.WORKER_UNREACHABLE:
            self.unreachable.append(event.worker)
        if event.kind is not EventKind.TASK_STARTED or event.stage != self.stage:
            return
        with self._lock:
            if self.frozen:
                return
            self.frozen_url = event.worker
            self.frozen.append(self.pids[event.worker])
        os.kill(self.frozen[0], signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.frozen:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.timeout(300)
def test_a_frozen_worker_costs_the_liveness_timeout_not_the_task_timeout(tpch_sf01, single_node_sf01):
    sql = tpch_query(18)
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf01)
    with LocalCluster(3) as cluster:
        freezer = FreezeAtStage(cluster, stage=1)
        try:
            with DistributedContext(ctx, workers=cluster, config=CONFIG, handlers=[freezer]) as dctx:
                started = time.monotonic()
                got = dctx.sql(sql).to_arrow_table()
                seconds = time.monotonic() - started
        finally:
            freezer.thaw()
        assert freezer.frozen, "no task of stage 1 was sent: the test froze nothing"
        assert freezer.unreachable == [freezer.frozen_url]
        # the liveness timeout, a probe interval, and the query itself on a busy machine
        assert seconds < LIVENESS_TIMEOUT + 45, f"took {seconds:.1f}s"
    assert_tables_equal(got, single_node_sf01.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(dctx)


class FreezeAtEnd:
    """Freezes (SIGSTOP) a worker that ran a task of the query once its result is complete,
    just before the query's data is released: no task of it runs there any more."""

    def __init__(self, cluster: LocalCluster):
        self.pids = dict(zip(cluster.get_urls(), (p.pid for p in cluster.processes), strict=True))
        self.ran: list[str] = []
        self.frozen: list[int] = []

    def on_event(self, event) -> None:
        if event.kind is EventKind.TASK_FINISHED and event.worker in self.pids:
            self.ran.append(event.worker)
        if event.kind is EventKind.QUERY_FINISHED and self.ran and not self.frozen:
            self.frozen.append(self.pids[self.ran[0]])
            os.kill(self.frozen[0], signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.frozen:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.timeout(300)
def test_a_worker_frozen_before_the_release_costs_the_liveness_timeout_not_the_connect_timeout(
    tpch_sf001, single_node_sf001
):
    sql = tpch_query(9)
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    config = DistributedConfig(
        partitions_per_task=2,
        bytes_per_partition=64 * 1024,
        connect_timeout=TASK_TIMEOUT,  # far above what the query may take: waiting for it is the bug
        task_timeout=TASK_TIMEOUT,
        liveness_timeout=LIVENESS_TIMEOUT,
    )
    with LocalCluster(3) as cluster:
        freezer = FreezeAtEnd(cluster)
        try:
            with DistributedContext(ctx, workers=cluster, config=config, handlers=[freezer]) as dctx:
                started = time.monotonic()
                got = dctx.sql(sql).to_arrow_table()
                seconds = time.monotonic() - started
        finally:
            freezer.thaw()
        assert freezer.frozen, "no task ran on a worker: the test froze nothing"
        # the liveness timeout, a probe interval, and the query itself on a busy machine
        assert seconds < LIVENESS_TIMEOUT + 45, f"took {seconds:.1f}s"
    assert_tables_equal(got, single_node_sf001.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(dctx)
