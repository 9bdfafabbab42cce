"""RayCluster: workers as Ray actors on a local Ray, answering like single-node DataFusion,
surviving an actor killed mid-query, and leaving no actor nor spool behind.

Ray starts once for the module (several seconds); its workers listen on loopback. The default
run keeps one query test and the quick checks; the 22 TPC-H queries and the kill run with the
slow tests."""

from __future__ import annotations

import dataclasses
import glob
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.common.allocator import DECOMMIT_VARIABLE
from datafusion_distributed.events import EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import FORCED_CONFIG
from datafusion_distributed.test_utils.recorder import EventRecorder
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, register_tpch, tpch_query

ray = pytest.importorskip("ray")

from datafusion_distributed import RayCluster  # noqa: E402 - only once Ray is known to be there
from datafusion_distributed.clusters.ray import _resolve_placement  # noqa: E402

LOOPBACK = "127.0.0.1"
CONFIG = DistributedConfig(partitions_per_task=2, bytes_per_partition=4 * 1024, connect_timeout=10)
# Stages re-planned from their inputs' sizes, but never down to one task or into the head stage:
# the later stages of a query on small data still run on workers, for a test to kill one.
STAY_ON_WORKERS = dataclasses.replace(CONFIG, adaptive_one_task_bytes=0, adaptive_task_bytes=1)


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module: 4 logical CPUs, no dashboard, the workers' logs kept to Ray's files."""
    started = not ray.is_initialized()
    sigterm = signal.getsignal(signal.SIGTERM)
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()
        signal.signal(signal.SIGTERM, sigterm)  # ray.init set its own: the later tests expect theirs


@pytest.fixture(scope="module")
def cluster(local_ray):
    """Two workers packed on the local Ray's one node; closed, they leave no spool (those of
    actors killed and restarted included)."""
    with RayCluster(2, placement="pack", host=LOOPBACK) as c:
        yield c
    assert not any(os.path.exists(d) for d in c.spool_dirs)


def distributed(tpch_path, cluster, handlers=(), config=CONFIG) -> DistributedContext:
    ctx = SessionContext()
    register_tpch(ctx, tpch_path)
    return DistributedContext(ctx, workers=cluster, config=config, handlers=handlers)


def assert_dead(actor) -> None:
    """`ray.kill` is asynchronous: a call may still be answered just after it, never for long."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(actor.url.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.2)
    pytest.fail(f"the actor {actor} still answers 30 s after it was killed")


def test_queries_on_ray_workers_match_single_node_and_close_leaves_nothing(
    local_ray, tpch_sf001, single_node_sf001
):
    token = "t" * 32
    with RayCluster(2, placement="pack", host=LOOPBACK, auth_token=token) as cluster:
        assert cluster.auth_token == token
        urls = cluster.get_urls()
        assert len(set(urls)) == 2 and all(u.startswith(f"grpc://{LOOPBACK}:") for u in urls)
        assert all(os.path.isdir(d) for d in cluster.spool_dirs)
        with distributed(tpch_sf001, cluster) as dctx:
            assert dctx.exchange_compression() == "lz4"  # no spool shared in place: exchanges cross Flight
            for n in (3, 18):
                sql = tpch_query(n)
                df = dctx.sql(sql)
                assert len(df.distributed_plan().stages) > 1
                assert_tables_equal(df.to_arrow_table(), single_node_sf001.sql(sql).to_arrow_table(), sql=sql)
                assert_ran_distributed(dctx)
    assert not any(os.path.exists(d) for d in cluster.spool_dirs)
    assert ray.is_initialized()  # the Ray this process started is left running
    for actor in cluster.actors:
        assert_dead(actor)
    with pytest.raises(RuntimeError, match="closed"):
        cluster.get_urls()
    cluster.close()  # twice does nothing


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"placement": "everywhere"}, r"placement must be one of 'auto', 'strict_spread', 'spread', 'pack'"),
        ({"n": 0}, "at least one worker"),
        ({"shared_spool_root": "/x"}, "do not share spools"),
        ({"auth_token": "with space"}, "token must be printable"),
        ({"num_cpus": 0}, "num_cpus must be positive"),
        ({"url_timeout": 0}, "must be positive numbers of seconds"),
    ],
)
def test_bad_options_are_refused_before_anything_starts(options, error):
    with pytest.raises(ValueError, match=error):
        RayCluster(**options)


def ray_spools() -> set[str]:
    """The spool folders of Ray workers on this machine."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "datafusion-distributed-ray-*")))


def test_a_worker_that_fails_to_start_fails_the_cluster_with_its_reason(local_ray):
    before = ray_spools()
    with pytest.raises(
        RuntimeError, match="(?s)Ray worker 0 failed to start: .*memory_limit_bytes must be positive"
    ):
        RayCluster(1, host=LOOPBACK, memory_limit_bytes=-1, max_restarts=0)
    assert ray_spools() <= before


def test_more_workers_than_nodes_in_strict_spread_fail_in_time_naming_the_cause(local_ray):
    with pytest.raises(TimeoutError, match=r"did not start within 3s .*1 alive node.*node per worker"):
        RayCluster(2, placement="strict_spread", host=LOOPBACK, start_timeout=3)


def test_by_default_more_workers_than_nodes_share_the_nodes_at_once(local_ray):
    # a laptop's Ray has one node: the default placement must not wait for a second one
    with RayCluster(2, host=LOOPBACK, start_timeout=20) as cluster:
        assert cluster.placement == "spread"
        assert len(cluster.get_urls()) == 2
        with DistributedContext(workers=cluster) as dctx:
            assert dctx.sql("SELECT count(*) AS n FROM generate_series(1, 1000)").to_pylist() == [{"n": 1000}]


@pytest.mark.parametrize(
    ("workers", "nodes", "chosen"), [(1, 1, "strict_spread"), (3, 3, "strict_spread"), (2, 1, "spread")]
)
def test_auto_placement_spreads_strictly_only_when_there_is_a_node_per_worker(workers, nodes, chosen):
    assert _resolve_placement("auto", workers, nodes) == chosen
    assert _resolve_placement("pack", workers, nodes) == "pack"


@pytest.mark.slow
def test_by_default_one_worker_per_node(local_ray):
    with RayCluster(host=LOOPBACK) as cluster:
        assert len(cluster.get_urls()) == 1  # the local Ray has one node


def test_importing_the_package_does_not_import_ray():
    code = "import sys, datafusion_distributed; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_sf01_on_ray_matches_single_node(cluster, tpch_sf01, single_node_sf01, n):
    sql = tpch_query(n)
    with distributed(tpch_sf01, cluster) as dctx:
        got = dctx.sql(sql).to_arrow_table()
    assert_tables_equal(got, single_node_sf01.sql(sql).to_arrow_table(), sql=sql)


class KillAtStage:
    """Kills (letting Ray restart it) the actor whose worker the first task of `stage` or a
    later stage is sent to (not the coordinator's head stage), and records the workers reported
    unreachable."""

    def __init__(self, cluster: RayCluster, stage: int):
        self.actors = dict(zip(cluster.get_urls(), cluster.actors, strict=True))
        self.stage = stage
        self.killed: list[str] = []
        self.unreachable: list[str] = []
        self._lock = threading.Lock()

    def on_event(self, event) -> None:
        if event.kind is EventKind.WORKER_UNREACHABLE:
            self.unreachable.append(event.worker)
        if event.kind is not EventKind.TASK_STARTED or event.stage < self.stage:
            return
        if event.worker not in self.actors:  # the head stage, run by the coordinator
            return
        with self._lock:
            if self.killed:
                return
            self.killed.append(event.worker)
        ray.kill(self.actors[event.worker], no_restart=False)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [9, 18, 21])
def test_an_actor_killed_mid_query_is_a_lost_worker_and_comes_back(cluster, tpch_sf01, single_node_sf01, n):
    sql = tpch_query(n)
    killer = KillAtStage(cluster, stage=1)
    with distributed(tpch_sf01, cluster, handlers=[killer], config=STAY_ON_WORKERS) as dctx:
        got = dctx.sql(sql).to_arrow_table()
    assert killer.killed, "no task after stage 0 ran on a worker: the test killed nothing"
    assert killer.unreachable == killer.killed
    assert_tables_equal(got, single_node_sf01.sql(sql).to_arrow_table(), sql=sql)
    # Ray restarts the actor: a new worker, on a new port, that the resolver finds
    deadline = time.monotonic() + 60
    while killer.killed[0] in (urls := cluster.get_urls()) or len(urls) < 2:
        assert time.monotonic() < deadline, f"the killed worker did not come back: {urls}"
        time.sleep(0.5)
    with distributed(tpch_sf01, cluster) as dctx:
        again = dctx.sql(sql).to_arrow_table()
    assert_tables_equal(again, single_node_sf01.sql(sql).to_arrow_table(), sql=sql)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_example_runs():
    """examples/ray_cluster.py, in a process of its own: it starts and shuts down its own Ray."""
    example = Path(__file__).parents[2] / "examples" / "ray_cluster.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert "the same answers as single-node DataFusion; cluster closed" in out.stdout


OWN_RAY = """
import signal, ray
from datafusion_distributed import RayCluster

with RayCluster(1, host="127.0.0.1") as cluster:
    print(ray.is_initialized(), len(cluster.get_urls()))
print(ray.is_initialized(), signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_ray_the_cluster_started_is_shut_down_with_it():
    """In a process of its own: without ray.init, the cluster starts a local Ray and shuts it
    down on close, putting back the SIGTERM handler Ray replaced."""
    out = subprocess.run([sys.executable, "-c", OWN_RAY], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "1", "False", "True"]


def test_scale_adds_workers_mid_query_that_take_tasks_and_drains_those_it_removes_mid_query(
    local_ray, tpch_sf001, single_node_sf001
):
    config = dataclasses.replace(FORCED_CONFIG, worker_refresh_seconds=0.0)
    with RayCluster(2, placement="pack", host=LOOPBACK, num_cpus=0.5, drain_timeout=20) as cluster:
        recorder, at, codes = EventRecorder(), [], []

        class ScaleDuringTheQuery:
            """Adds a worker after the first stage; removes it, draining, after the next one."""

            def on_event(self, event):
                if event.kind is not EventKind.STAGE_FINISHED:
                    return
                if not at:
                    assert cluster.scale(3) == []
                    at.append(len(recorder.events))
                elif len(at) == 1 and any(
                    e.worker == cluster.get_urls()[2] for e in recorder.events[at[0] :]
                ):
                    at.append(len(recorder.events))
                    removing = threading.Thread(target=lambda: codes.extend(cluster.scale(2)))
                    removing.start()

        ctx = SessionContext()
        register_tpch(ctx, tpch_sf001)
        handlers = [recorder, ScaleDuringTheQuery()]
        with DistributedContext(ctx, workers=cluster, config=config, handlers=handlers) as dctx:
            sql = tpch_query(5)
            assert_tables_equal(
                dctx.sql(sql).to_arrow_table(), single_node_sf001.sql(sql).to_arrow_table(), sql=sql
            )
            assert_ran_distributed(dctx)
        deadline = time.monotonic() + 60
        while not codes and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(at) == 2, "the added worker ran tasks of the query's later stages"
        assert codes == [True]  # drained in time: it served its outputs until the query ended
        assert len(cluster.get_urls()) == 2
        assert recorder.lost() == []
        with pytest.raises(ValueError, match="at least one worker"):
            cluster.scale(0)


def test_worker_actors_hand_freed_memory_back_lazily_unless_told_otherwise(local_ray):
    def setting(actor) -> str | None:
        return ray.get(actor.__ray_call__.remote(lambda _: os.environ.get(DECOMMIT_VARIABLE)), timeout=60)

    with RayCluster(1, placement="pack", host=LOOPBACK) as cluster:
        assert setting(cluster.actors[0]) == "0"  # as the library's other worker processes
    given = {"env_vars": {DECOMMIT_VARIABLE: "1"}}
    with RayCluster(1, placement="pack", host=LOOPBACK, actor_options={"runtime_env": given}) as cluster:
        assert setting(cluster.actors[0]) == "1"
