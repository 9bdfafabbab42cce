"""All 22 TPC-H queries at SF 0.1 over real Flight workers match single-node DataFusion: the
embedded cluster, three worker processes sharing a spool folder, and three sharing nothing
(each on its own loopback address, every exchange over Flight, lz4-compressed)."""

from __future__ import annotations

import pytest

from datafusion_distributed import DistributedConfig, LocalCluster
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, tpch_query

# Small partitions so SF 0.1 really splits across tasks: every query, even those whose only
# split scan is a join's small side (q13 splits `customer`'s 80 KiB key column).
CONFIG = DistributedConfig(partitions_per_task=2, bytes_per_partition=32 * 1024)


@pytest.fixture(scope="module")
def embedded(tpch_sf01, distributed_tpch):
    with distributed_tpch(tpch_sf01, config=CONFIG) as dctx:
        yield dctx
        assert dctx._cluster.spool_files() == []


@pytest.fixture(scope="module")
def three_processes(tpch_sf01, distributed_tpch):
    with LocalCluster(3) as cluster:
        with distributed_tpch(tpch_sf01, workers=cluster, config=CONFIG) as dctx:
            yield dctx
        assert cluster.spool_files() == [], "a query left data in a worker's spool"
    assert all(p.poll() is not None for p in cluster.processes)


@pytest.fixture(scope="module")
def three_sharing_nothing(tpch_sf01, distributed_tpch):
    hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    with LocalCluster(3, share_spools=False, hosts=hosts) as cluster:
        with distributed_tpch(tpch_sf01, workers=cluster, config=CONFIG) as dctx:
            assert dctx.exchange_compression() == "lz4"
            yield cluster, dctx
        assert cluster.spool_files() == [], "a query left data in a worker's spool"


def served_file_bytes(cluster: LocalCluster) -> int:
    """Bytes of output files the workers have copied out over Flight so far."""
    settings = ClientConfig(auth_token=cluster.auth_token)
    return sum(WorkerClient(url, settings).health()["served_file_bytes"] for url in cluster.get_urls())


@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS)
def test_tpch_embedded(embedded, single_node_sf01, n):
    sql = tpch_query(n)
    df = embedded.sql(sql)
    assert_tables_equal(df.to_arrow_table(), single_node_sf01.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)


@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS)
def test_tpch_local_cluster(three_processes, single_node_sf01, n):
    sql = tpch_query(n)
    df = three_processes.sql(sql)
    assert_tables_equal(df.to_arrow_table(), single_node_sf01.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)


@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS)
def test_tpch_sharing_nothing(three_sharing_nothing, single_node_sf01, n):
    cluster, dctx = three_sharing_nothing
    sql = tpch_query(n)
    before = served_file_bytes(cluster)
    df = dctx.sql(sql)
    assert_tables_equal(df.to_arrow_table(), single_node_sf01.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)
    fetched = sum(stage.fetched_bytes for stage in df.metrics.stages.values())
    assert served_file_bytes(cluster) - before == fetched  # every fetched byte crossed Flight
    if len(df.distributed_plan().stages) > 2:  # a worker stage reads another's outputs
        assert fetched > 0
