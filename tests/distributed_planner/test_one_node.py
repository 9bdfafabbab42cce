"""Scans through an object store only the user's SessionContext has run on one node: the
library cannot send DataFusion's store objects to the workers. Local files, and any store when
a session hook may register it where tasks run, stay distributed."""

from __future__ import annotations

from pathlib import Path

from datafusion import SessionContext
from datafusion.object_store import LocalFileSystem

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node

SPLIT = DistributedConfig(bytes_per_partition=64 * 1024)  # several tasks per stage at SF 0.01
SQL = (
    "SELECT l_returnflag, count(*) AS n, sum(l_quantity) AS q FROM lineitem l JOIN orders o "
    "ON l_orderkey = o_orderkey GROUP BY l_returnflag ORDER BY l_returnflag"
)


def _gs_context(tpch: Path) -> SessionContext:
    """`lineitem` read through a store of the `gs://` scheme registered the DataFusion way (a
    local folder behind it, so nothing leaves the machine); `orders` from local files."""
    ctx = SessionContext()
    ctx.register_object_store("gs://", LocalFileSystem(prefix=str(tpch)), "tpch")
    ctx.register_parquet("lineitem", "gs://tpch/lineitem/")
    ctx.register_parquet("orders", str(tpch / "orders"))
    return ctx


def test_a_scan_of_a_store_only_the_session_context_has_runs_on_one_node(tpch_sf001, single_node_sf001):
    with DistributedContext(_gs_context(tpch_sf001), config=SPLIT) as dctx:
        df = dctx.sql(SQL)
        plan = df.distributed_plan()
        assert not plan.is_distributed
        assert plan.single_node.startswith(
            "DataSourceExec reads gs://tpch/, whose object store is registered"
        )
        assert "runs on one node: DataSourceExec reads gs://tpch/" in df.explain_string()
        assert_tables_equal(df.to_arrow_table(), single_node_sf001.sql(SQL).to_arrow_table(), sql=SQL)
        assert_ran_on_one_node(df)


def test_local_files_stay_distributed(tpch_sf001, single_node_sf001):
    with DistributedContext(single_node_sf001, config=SPLIT) as dctx:
        df = dctx.sql(SQL)
        assert df.distributed_plan().is_distributed
        assert_tables_equal(df.to_arrow_table(), single_node_sf001.sql(SQL).to_arrow_table(), sql=SQL)
        assert_ran_distributed(df)


def test_a_session_hook_may_register_the_store_where_tasks_run(tpch_sf001, single_node_sf001):
    def hook(config):
        ctx = SessionContext(config)
        ctx.register_object_store("gs://", LocalFileSystem(prefix=str(tpch_sf001)), "tpch")
        return ctx

    with DistributedContext(_gs_context(tpch_sf001), config=SPLIT, session_builder=hook) as dctx:
        df = dctx.sql(SQL)
        assert df.distributed_plan().is_distributed
        assert_tables_equal(df.to_arrow_table(), single_node_sf001.sql(SQL).to_arrow_table(), sql=SQL)
        assert_ran_distributed(df)
