"""Workers of one host read each other's task outputs from disk instead of fetching them."""

from __future__ import annotations

import dataclasses
import os

from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, EmbeddedCluster
from datafusion_distributed.protocol.fetch import readable_in_place
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.tpch import register_tpch

SQL = "SELECT o_orderpriority, count(*) AS n, sum(o_totalprice) AS total FROM orders GROUP BY 1"
CONFIG = DistributedConfig(bytes_per_partition=1024, exchange="spool")  # outputs are files to read in place


def test_only_files_inside_the_given_folders_with_the_reported_size(tmp_path):
    spools, elsewhere = tmp_path / "spools", tmp_path / "elsewhere"
    (spools / "worker-1").mkdir(parents=True)
    elsewhere.mkdir()
    output = spools / "worker-1" / "part-0.arrow"
    output.write_bytes(b"x" * 10)
    secret = elsewhere / "secret"
    secret.write_bytes(b"y" * 10)
    os.symlink(secret, spools / "worker-1" / "link.arrow")
    folders = [str(spools)]

    assert readable_in_place(str(output), 10, folders)
    assert not readable_in_place(str(output), 11, folders)  # not the file its producer wrote
    assert not readable_in_place(str(secret), 10, folders)
    assert not readable_in_place(str(spools / "worker-1" / "link.arrow"), 10, folders)  # escapes
    assert not readable_in_place(str(spools / ".." / "elsewhere" / "secret"), 10, folders)
    assert not readable_in_place(str(spools / "worker-1" / "gone.arrow"), 10, folders)
    assert not readable_in_place(None, 10, folders)
    assert not readable_in_place(str(output), 10, [])


def _inputs(df):
    plan, metrics = df.distributed_plan(), df.metrics
    return [metrics.stage(s.id).input_totals(i) for s in plan.stages for i in range(len(s.inputs))]


def test_a_cluster_on_one_host_reads_outputs_in_place_uncompressed(
    tpch_sf001, single_node_sf001, distributed_tpch
):
    with distributed_tpch(tpch_sf001, config=CONFIG) as dctx:
        assert dctx.exchange_compression() is None  # nothing to save by compressing
        df = dctx.sql(SQL)
        assert_tables_equal(df.to_arrow_table(), single_node_sf001.sql(SQL).to_arrow_table())
        assert_ran_distributed(dctx)
        inputs = _inputs(df)
        assert inputs and all(read.bytes > 0 and read.fetched_bytes == 0 for read in inputs)


def test_workers_without_a_shared_folder_fetch_compressed_outputs(tpch_sf001, single_node_sf001):
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    with EmbeddedCluster(2, shared_spool_root=None) as cluster:
        # a list of URLs: the coordinator knows nothing of where the workers keep their files
        config = dataclasses.replace(CONFIG, auth_token=cluster.auth_token)
        dctx = DistributedContext(ctx, workers=cluster.get_urls(), config=config)
        assert dctx.exchange_compression() == "lz4"
        df = dctx.sql(SQL)
        assert_tables_equal(df.to_arrow_table(), single_node_sf001.sql(SQL).to_arrow_table())
        assert_ran_distributed(dctx)
        assert any(read.fetched_bytes > 0 for read in _inputs(df))
