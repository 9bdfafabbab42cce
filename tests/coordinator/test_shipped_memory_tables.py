"""A large pandas table joined with a parquet table, its data shipped to the workers once."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, EmbeddedCluster, LocalCluster
from datafusion_distributed.events.handlers import DistributedHandler, Event, EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import forced_distribution
from datafusion_distributed.test_utils.tpch import register_tpch

QUERY = """
SELECT c_mktsegment, count(*) AS n, sum(v) AS total, min(s) AS first_s, max(d) AS last_d
FROM people JOIN customer ON k = c_custkey
GROUP BY c_mktsegment
"""


def people(rows: int, keys: int) -> pd.DataFrame:
    """A pandas table of int, float, string and date columns; `k` joins with c_custkey."""
    rng = np.random.default_rng(rows)
    return pd.DataFrame(
        {
            "k": rng.integers(1, keys + 1, rows),
            "v": rng.random(rows),
            "s": [f"person-{i % 1013}" for i in range(rows)],
            "d": pd.to_datetime(rng.integers(0, 10_000, rows), unit="D"),
        }
    )


def contexts(tpch, table: pd.DataFrame) -> tuple[SessionContext, SessionContext]:
    """(single node, the distributed query's context): the same tables in each."""
    made = []
    for _ in range(2):
        ctx = SessionContext()
        register_tpch(ctx, tpch)
        ctx.from_pandas(table, name="people")
        made.append(ctx)
    return made[0], made[1]


SHIPPED = forced_distribution(memory_table_inline_bytes=1024)


def check(dctx: DistributedContext, single: SessionContext) -> None:
    df = dctx.sql(QUERY)
    assert "memory table, 10000 rows" in df.explain_string()
    assert "shipped once" in df.explain_string()
    assert_tables_equal(df.to_arrow_table(), single.sql(QUERY).to_arrow_table(), sql=QUERY)
    assert_ran_distributed(df)


def test_shipped_on_the_embedded_cluster(tpch_sf001):
    single, ctx = contexts(tpch_sf001, people(10_000, 1500))
    with DistributedContext(ctx, **SHIPPED) as dctx:
        check(dctx, single)
        assert dctx._cluster.spool_files() == []


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


def test_shipped_on_a_local_cluster_read_in_place(cluster, tpch_sf001):
    single, ctx = contexts(tpch_sf001, people(10_000, 1500))
    with DistributedContext(ctx, workers=cluster, **SHIPPED) as dctx:
        assert dctx.local_spools()
        check(dctx, single)
    assert cluster.spool_files() == []


def test_uploaded_to_workers_that_do_not_share_this_host(cluster, tpch_sf001):
    single, ctx = contexts(tpch_sf001, people(10_000, 1500))
    settings = {**SHIPPED, "config": dataclasses.replace(SHIPPED["config"], auth_token=cluster.auth_token)}
    with DistributedContext(ctx, workers=cluster.get_urls(), **settings) as dctx:
        assert not dctx.local_spools()  # plain URLs: every file travels over Flight
        check(dctx, single)
    assert cluster.spool_files() == []


class StopTheHolder(DistributedHandler):
    """When the first stage starts, stop the worker holding the uploaded table."""

    def __init__(self, cluster: EmbeddedCluster):
        self.cluster = cluster
        self.stopped: list[str] = []

    def on_event(self, event: Event) -> None:
        """Stop the holder once, before any task reads the table."""
        if event.kind is not EventKind.STAGE_STARTED or self.stopped:
            return
        for worker in self.cluster.workers:
            if any("/stage-" in f for f in worker.spool.files()):
                self.stopped.append(worker.url)
                worker.stop()


def test_a_lost_holder_gets_the_table_again(tpch_sf001):
    single, ctx = contexts(tpch_sf001, people(10_000, 1500))
    # no shared spool root: the table's file can only be fetched from the worker holding it
    with EmbeddedCluster(3, shared_spool_root=None) as cluster:
        stop = StopTheHolder(cluster)
        config = dataclasses.replace(SHIPPED["config"], auth_token=cluster.auth_token, connect_timeout=5)
        handlers = [*SHIPPED["handlers"], stop]
        with DistributedContext(ctx, workers=cluster.get_urls(), config=config, handlers=handlers) as dctx:
            df = dctx.sql(QUERY)
            got = df.to_arrow_table()
        assert len(stop.stopped) == 1
    assert_tables_equal(got, single.sql(QUERY).to_arrow_table(), sql=QUERY)
    assert_ran_distributed(df)


def test_a_small_table_still_travels_in_the_plan(tpch_sf001):
    single, ctx = contexts(tpch_sf001, people(100, 1500))
    with DistributedContext(ctx, **forced_distribution()) as dctx:
        df = dctx.sql(QUERY)
        assert "memory table" not in df.explain_string()
        assert_tables_equal(df.to_arrow_table(), single.sql(QUERY).to_arrow_table(), sql=QUERY)
        assert_ran_distributed(df)


ORDERS = """
SELECT o_orderpriority, count(*) AS n, sum(v) AS total, min(s) AS first_s, max(d) AS last_d
FROM people JOIN orders ON k = o_orderkey
GROUP BY o_orderpriority
"""


@pytest.mark.slow
def test_three_million_rows_join_a_parquet_table(tpch_sf01):
    """The table of the issue: 3M rows used to pass the 64 MiB message cap of a task, inside
    the plan of each task that read a stage over it."""
    single, ctx = contexts(tpch_sf01, people(3_000_000, 150_000))
    # orders split over the workers (a scan counts only its projected columns' bytes, under
    # 1 MiB here) and no join side broadcast: the join runs in tasks on the workers, each
    # reading the stage that shuffles the table
    config = DistributedConfig(
        bytes_per_partition=64 * 1024,
        broadcast_inline_bytes=0,
        broadcast_total_rows=0,
        broadcast_total_bytes=0,
    )
    with LocalCluster(3) as workers, DistributedContext(ctx, workers=workers, config=config) as dctx:
        df = dctx.sql(ORDERS)
        explained = df.explain_string()
        assert "memory table, 3000000 rows" in explained
        assert "HashJoinExec: mode=Partitioned" in explained
        assert_tables_equal(df.to_arrow_table(), single.sql(ORDERS).to_arrow_table(), sql=ORDERS)
        assert_ran_distributed(df.metrics)
        assert workers.spool_files() == []
