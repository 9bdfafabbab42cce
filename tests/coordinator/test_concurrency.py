"""Queries from several threads at once over one cluster and one DistributedContext."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query

QUERIES = [1, 3, 5, 6, 10, 12, 13, 18]  # 8 queries: aggregates, joins, sorts, a subquery


@pytest.fixture(scope="module")
def expected(single_node_sf001):
    return {n: single_node_sf001.sql(tpch_query(n)).to_arrow_table() for n in QUERIES}


def test_eight_queries_from_four_threads_share_one_cluster(tpch_sf001, expected):
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    config = DistributedConfig(bytes_per_partition=1)  # every file a task: each query is split
    with LocalCluster(3) as cluster, DistributedContext(ctx, workers=cluster, config=config) as dctx:
        with ThreadPoolExecutor(4) as pool:
            frames = {n: dctx.sql(tpch_query(n)) for n in QUERIES}
            results = dict(zip(QUERIES, pool.map(lambda n: frames[n].to_arrow_table(), QUERIES), strict=True))
        for n in QUERIES:
            assert_tables_equal(results[n], expected[n], sql=tpch_query(n))
            assert_ran_distributed(frames[n])
        assert cluster.spool_files() == []
