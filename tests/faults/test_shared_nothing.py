"""Workers that share nothing: no spool folder in common, every exchange over Arrow Flight.

The proof that nothing is read in place across workers: with every stage routed to another
worker than the stage it reads, each input byte a task reads must have been fetched, and the
workers must have served exactly the bytes the query's metrics say were fetched. The same
query on workers that share a spool folder fetches and serves nothing, so the check can fail.
"""

from __future__ import annotations

import os

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, EmbeddedCluster, LocalCluster
from datafusion_distributed.events import DistributedHandler
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query

SQL = tpch_query(3)  # a join of three tables: stages that read one and two other stages
# run as cut: re-planned from its small sizes, its last stages would run in the coordinator
CONFIG = DistributedConfig(bytes_per_partition=64 * 1024, adaptive=False)
LOOPBACK_HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


class StageByWorker(DistributedHandler):
    """All the tasks of a stage on one worker, never one that ran a stage it reads: every
    input a worker reads was written by another worker (stages read at most two others)."""

    def __init__(self):
        self.placed: dict[int, str] = {}

    def route_task(self, request):
        """The stage's worker: the first that ran none of its inputs' stages."""
        stage = request.stage
        if stage.id not in self.placed:
            taken = {self.placed.get(i.producer) for i in stage.inputs}
            self.placed[stage.id] = next(w for w in request.workers if w not in taken)
        return self.placed[stage.id]


def served_file_bytes(cluster) -> int:
    """Bytes of output files the cluster's workers have copied out over Flight so far."""
    settings = ClientConfig(auth_token=cluster.auth_token)
    return sum(WorkerClient(url, settings).health()["served_file_bytes"] for url in cluster.get_urls())


def run_routed(cluster, tpch, single_node):
    """Run SQL with StageByWorker on `cluster`; the worker stages' inputs, the bytes the whole
    query fetched, and the bytes the workers served meanwhile."""
    ctx = SessionContext()
    register_tpch(ctx, tpch)
    before = served_file_bytes(cluster)
    with DistributedContext(ctx, workers=cluster, config=CONFIG, handlers=[StageByWorker()]) as dctx:
        df = dctx.sql(SQL)
        assert_tables_equal(df.to_arrow_table(), single_node.sql(SQL).to_arrow_table(), sql=SQL)
        assert_ran_distributed(df)
        plan, metrics = df.distributed_plan(), df.metrics
    worker_stages = [s for s in plan.stages if s is not plan.final]
    inputs = [metrics.stage(s.id).input_totals(i) for s in worker_stages for i in range(len(s.inputs))]
    fetched = sum(stage.fetched_bytes for stage in metrics.stages.values())
    return inputs, fetched, served_file_bytes(cluster) - before


def test_no_worker_reads_another_workers_spool_in_place(tpch_sf001, single_node_sf001):
    with LocalCluster(3, share_spools=False) as cluster:
        assert cluster.shared_spool_root is None
        inputs, fetched, served = run_routed(cluster, tpch_sf001, single_node_sf001)
    assert inputs, "the query should read an exchange on a worker"
    for read in inputs:  # written by another worker: all of it crossed the network
        assert read.bytes > 0 and read.local_bytes == 0 and read.fetched_bytes == read.bytes
    assert served == fetched > 0  # the workers sent exactly what the query says it fetched


def test_workers_sharing_a_spool_folder_fetch_nothing(tpch_sf001, single_node_sf001):
    with LocalCluster(3) as cluster:
        inputs, fetched, served = run_routed(cluster, tpch_sf001, single_node_sf001)
    assert inputs and all(read.local_bytes == read.bytes > 0 for read in inputs)
    assert fetched == served == 0


def test_each_worker_is_told_only_of_its_own_spool():
    with LocalCluster(3, share_spools=False, hosts=LOOPBACK_HOSTS) as cluster:
        spools = cluster.spools
        assert [url.rsplit(":", 1)[0] for url in cluster.get_urls()] == [
            f"grpc://{h}" for h in LOOPBACK_HOSTS
        ]
        assert len({os.path.dirname(s) for s in spools}) == 1  # the system's temporary folder
        assert not any(other.startswith(s + os.sep) for s in spools for other in spools)
        for process, spool in zip(cluster.processes, spools, strict=True):
            with open(f"/proc/{process.pid}/cmdline", "rb") as f:
                args = f.read().decode().split("\0")
            assert args[args.index("--spool-dir") + 1] == spool
            assert "--shared-spool-root" not in args
        with DistributedContext(SessionContext(), workers=cluster) as dctx:
            assert dctx.local_spools() == ()
            assert dctx.exchange_compression() == "lz4"
    assert not any(os.path.exists(s) for s in spools)


def test_hosts_name_one_address_per_worker():
    with pytest.raises(ValueError, match="one address per worker"):
        LocalCluster(2, hosts=["127.0.0.2"])


def test_an_embedded_cluster_sharing_nothing_says_so():
    with EmbeddedCluster(2, share_spools=False) as cluster:
        assert cluster.shared_spool_root is None
        with DistributedContext(SessionContext(), workers=cluster) as dctx:
            assert dctx.local_spools() == ()
    with EmbeddedCluster(2, shared_spool_root=None) as cluster:  # the worker option, as before
        assert cluster.shared_spool_root is None
    with pytest.raises(ValueError, match="contradict"):
        EmbeddedCluster(2, share_spools=False, shared_spool_root="/somewhere")
