"""A worker that stops answering (frozen with SIGSTOP) costs its query the liveness timeout, not
the task timeout: it is treated as lost, its tasks rerun elsewhere, its outputs are recomputed."""

from __future__ import annotations

import dataclasses
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
        if event.kind is EventKind.TASK_FINISHED and event.worker in self.pids and event.metrics.rows:
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


# -- a worker frozen during each kind of stage --------------------------------------------
# Over workers that share nothing every exchange crosses Flight, so a consumer waits on a frozen
# worker's outputs: it is given up on once the worker misses its probes, those outputs are
# recomputed, and the consumer runs again. Adaptive execution and inlined build sides are off so that every kind of stage runs.
KINDS_CONFIG = dataclasses.replace(
    CONFIG, adaptive=False, bytes_per_partition=64 * 1024, broadcast_inline_bytes=0
)
KINDS_SQL = tpch_query(5)
UNORDERED = "SELECT l_orderkey, l_quantity FROM lineitem WHERE l_quantity > 45"


@pytest.fixture(scope="module", params=["sharing nothing", "sharing spools"])
def three_workers(request):
    """Three worker processes: sharing nothing (every exchange over Flight), or sharing their
    spools (outputs read in place, which a frozen worker does not hold up)."""
    with LocalCluster(3, share_spools=request.param == "sharing spools") as cluster:
        yield cluster


class FreezeWhenHeadStarts(FreezeAtStage):
    """Freezes the worker that ran the last finished task with rows just as the coordinator
    starts reading the final stage's inputs (a final stage of one task) or outputs (of
    several); a task that wrote no row is not read at all, so freezing its worker would hold
    up nothing."""

    def __init__(self, cluster: LocalCluster, final_tasks: int):
        super().__init__(cluster, stage=-1)
        self.final_tasks = final_tasks
        self.ran: list[str] = []

    def on_event(self, event) -> None:
        if event.kind is EventKind.WORKER_UNREACHABLE:
            self.unreachable.append(event.worker)
        if event.kind is EventKind.TASK_FINISHED and event.worker in self.pids and event.metrics.rows:
            self.ran.append(event.worker)
            if self.final_tasks > 1 and not self.frozen:  # the outputs the head streams
                self.frozen_url = event.worker
                self.frozen.append(self.pids[event.worker])
                os.kill(self.frozen[0], signal.SIGSTOP)
        if (
            event.kind is EventKind.TASK_STARTED
            and event.worker == "coordinator"
            and self.ran
            and not self.frozen
        ):
            self.frozen_url = self.ran[-1]
            self.frozen.append(self.pids[self.ran[-1]])
            os.kill(self.frozen[0], signal.SIGSTOP)


def _stage_of_kind(dctx: DistributedContext, kind: str) -> int:
    """The first stage of KINDS_SQL's plan that reads an input of `kind` (none: a scan)."""
    plan = dctx.sql(KINDS_SQL).distributed_plan()
    for stage in plan.stages:
        kinds = {inp.where.kind.name for inp in stage.inputs}
        if (kind == "SCAN" and not kinds) or kind in kinds:
            return stage.id
    raise AssertionError(f"no stage reads a {kind} input: {[s.id for s in plan.stages]}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "kind", ["SCAN", "COALESCE", "SHUFFLE", "final of one task", "final of several tasks"]
)
def test_a_worker_frozen_during_each_kind_of_stage_is_recovered_from(three_workers, tpch_sf01, kind):
    cluster = three_workers
    sql = UNORDERED if kind == "final of several tasks" else KINDS_SQL
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf01)
    single = SessionContext()
    register_tpch(single, tpch_sf01)
    if kind.startswith("final"):
        freezer: FreezeAtStage = FreezeWhenHeadStarts(cluster, 2 if kind == "final of several tasks" else 1)
    else:
        with DistributedContext(ctx, workers=cluster, config=KINDS_CONFIG) as planner:
            freezer = FreezeAtStage(cluster, stage=_stage_of_kind(planner, kind))
    try:
        with DistributedContext(ctx, workers=cluster, config=KINDS_CONFIG, handlers=[freezer]) as dctx:
            started = time.monotonic()
            df = dctx.sql(sql)
            got = df.to_arrow_table()
            seconds = time.monotonic() - started
    finally:
        freezer.thaw()
    assert freezer.frozen, f"nothing was frozen during a {kind} stage"
    if cluster.shared_spool_root is not None and kind.startswith("final"):
        assert set(freezer.unreachable) <= {freezer.frozen_url}  # its outputs are read in place
    else:
        assert freezer.unreachable == [freezer.frozen_url]
    # the liveness timeout, a probe interval, and the query itself on a busy machine
    assert seconds < LIVENESS_TIMEOUT + 45, f"took {seconds:.1f}s"
    assert_tables_equal(got, single.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)
    _no_files_left(cluster)


def _no_files_left(cluster: LocalCluster, seconds: float = 30) -> None:
    """Once thawed, the frozen worker gets the query's release too: no file is left."""
    deadline = time.monotonic() + seconds
    while cluster.spool_files() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.spool_files() == []
