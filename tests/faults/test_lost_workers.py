"""Queries return single-node answers while a worker process is killed at a random point."""

from __future__ import annotations

import random
import threading
import time

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, register_tpch, tpch_query
from datafusion_distributed.worker.spool import Spool

# small partitions: every query splits, q13 too (its only split scan is `customer`'s key column)
CONFIG = DistributedConfig(partitions_per_task=2, bytes_per_partition=32 * 1024, connect_timeout=10)
CI_QUERIES = [1, 3, 9, 13, 18, 21]


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c
        # What the queries leave is what a killed worker held when it died: its spool's TTL
        # sweep (an hour by default) removes it, and nothing lies outside a query's folder.
        later = time.time() + 3600.0 + 1
        for root in c.spools:
            Spool(root).sweep(now=later)
        assert c.spool_files() == []


def run_with_a_kill(cluster, tpch_path, n: int, seed: int):
    """Run query n while a seeded random worker dies after a seeded random delay."""
    rng = random.Random(seed)
    victim, delay = rng.randrange(3), rng.uniform(0.0, 0.4)
    ctx = SessionContext()
    register_tpch(ctx, tpch_path)
    killer = threading.Timer(delay, cluster.kill, args=(victim,))
    with DistributedContext(ctx, workers=cluster, config=CONFIG) as dctx:
        df = dctx.sql(tpch_query(n))
        killer.start()
        try:
            return df.to_arrow_table(), df
        finally:
            killer.join()
            cluster.restart(victim)


def _check(cluster, tpch_sf01, single_node, n):
    got, df = run_with_a_kill(cluster, tpch_sf01, n, seed=n)
    sql = tpch_query(n)
    assert_tables_equal(got, single_node.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)


@pytest.mark.parametrize("n", CI_QUERIES)
def test_tpch_survives_a_killed_worker(cluster, tpch_sf01, single_node_sf01, n):
    _check(cluster, tpch_sf01, single_node_sf01, n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [q for q in TPCH_QUERY_NUMBERS if q not in CI_QUERIES])
def test_tpch_survives_a_killed_worker_all(cluster, tpch_sf01, single_node_sf01, n):
    _check(cluster, tpch_sf01, single_node_sf01, n)
