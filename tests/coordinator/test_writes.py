"""Distributed file writes (COPY ... TO a folder, DataFrame.write_*) give exactly the files'
rows single-node DataFusion writes, from more than one task, atomically."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from datafusion import SessionContext, udf

from datafusion_distributed import DistributedContext, QueryFailed
from datafusion_distributed.coordinator.writes import STAGING_FOLDER
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import forced_distribution
from datafusion_distributed.test_utils.tpch import register_tpch
from tests.support.killed_writes import slow_cluster, with_a_worker_killed

# strings, decimals, dates, timestamps (with and without a time zone) and nulls
SELECT = """
    SELECT l_orderkey, l_linenumber, l_returnflag, l_extendedprice, l_shipdate, l_comment,
           CAST(l_shipdate AS TIMESTAMP) AS shipped_at,
           arrow_cast(CAST(l_commitdate AS TIMESTAMP), 'Timestamp(Microsecond, Some("+02:00"))') AS committed_at,
           CASE WHEN l_linenumber = 1 THEN NULL ELSE l_quantity END AS maybe_quantity
    FROM lineitem WHERE l_quantity > 10
"""
READERS = {"PARQUET": "read_parquet", "CSV": "read_csv", "JSON": "read_json"}


@pytest.fixture(scope="module")
def dctx(tpch_sf001):
    with DistributedContext(**forced_distribution()) as dctx:
        register_tpch(dctx, tpch_sf001)
        yield dctx


def files_under(folder) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, _, names in os.walk(folder)
        for name in names
    )


def read_back(folder, file_format: str, partition_by: str | None = None) -> pa.Table:
    ctx = SessionContext()
    partitions = [(partition_by, pa.string())] if partition_by else None
    reader = getattr(ctx, READERS[file_format])
    kwargs = {"table_partition_cols": partitions} if partitions else {}
    if file_format == "CSV":
        kwargs["has_header"] = True
    return reader(str(folder), **kwargs).to_arrow_table()


def single_node_copy(single_node, sql: str) -> pa.Table:
    return single_node.sql(sql).to_arrow_table()


@pytest.mark.parametrize("file_format", ["PARQUET", "CSV", "JSON"])
@pytest.mark.parametrize("partition_by", [None, "l_returnflag"])
def test_copy_writes_what_single_node_writes(dctx, single_node_sf001, tmp_path, file_format, partition_by):
    partitioned = f"PARTITIONED BY ({partition_by})" if partition_by else ""
    copy = f"COPY ({SELECT}) TO '{{}}' STORED AS {file_format} {partitioned}"
    explained = dctx.sql(copy.format(tmp_path / "dist")).explain_string()
    assert f"write: {file_format.lower()} files into {(tmp_path / 'dist').as_uri()}" in explained
    count = dctx.sql(copy.format(tmp_path / "dist")).to_arrow_table()
    expected_count = single_node_sf001.sql(copy.format(tmp_path / "single")).to_arrow_table()
    assert count == expected_count
    assert count.num_rows == 1 and count.column(0)[0].as_py() > 0

    written = files_under(tmp_path / "dist")
    assert not any(STAGING_FOLDER in name for name in written)
    tasks = {os.path.basename(name).split("-")[1] for name in written}
    assert len(tasks) > 1, f"one task wrote every file: {written}"
    if partition_by:
        assert all(name.startswith(f"{partition_by}=") for name in written)
    got = read_back(tmp_path / "dist", file_format, partition_by)
    expected = read_back(tmp_path / "single", file_format, partition_by)
    assert got.num_rows == expected_count.column(0)[0].as_py()
    assert got.column("shipped_at").null_count == 0  # timestamps are written, not left empty
    assert_tables_equal(got, expected)
    assert_ran_distributed(dctx)


def test_dataframe_writes_are_distributed(dctx, single_node_sf001, tmp_path):
    df = dctx.sql(SELECT)
    df.write_parquet(tmp_path / "dist", partition_by=["l_returnflag"])
    single_node_sf001.sql(SELECT).write_parquet(str(tmp_path / "single"), "zstd")
    got = read_back(tmp_path / "dist", "PARQUET", "l_returnflag")
    assert_tables_equal(
        got.select(read_back(tmp_path / "single", "PARQUET").column_names),
        read_back(tmp_path / "single", "PARQUET"),
    )
    assert_ran_distributed(dctx)
    assert len({name.split("-")[1] for name in os.listdir(tmp_path / "dist" / "l_returnflag=N")}) > 1

    df.write_csv(tmp_path / "csv", with_header=True)
    single_node_sf001.sql(SELECT).write_csv(str(tmp_path / "csv-single"), with_header=True)
    assert_tables_equal(read_back(tmp_path / "csv", "CSV"), read_back(tmp_path / "csv-single", "CSV"))
    assert_ran_distributed(dctx)

    df.write_json(str(tmp_path / "json"))
    single_node_sf001.sql(SELECT).write_json(str(tmp_path / "json-single"))
    assert_tables_equal(read_back(tmp_path / "json", "JSON"), read_back(tmp_path / "json-single", "JSON"))
    assert_ran_distributed(dctx)


def test_appending_keeps_the_files_already_there(dctx, single_node_sf001, tmp_path):
    copy = f"COPY ({SELECT}) TO '{tmp_path / 'out'}' STORED AS PARQUET"
    dctx.sql(copy).collect()
    first = files_under(tmp_path / "out")
    dctx.sql(copy).collect()
    second = files_under(tmp_path / "out")
    assert set(first) < set(second) and len(second) == 2 * len(first)
    once = single_node_sf001.sql(SELECT).to_arrow_table()
    assert_tables_equal(read_back(tmp_path / "out", "PARQUET"), pa.concat_tables([once, once]))
    assert_ran_distributed(dctx)


def test_a_single_file_stays_on_one_node_and_says_why(dctx, tmp_path):
    target = tmp_path / "one.parquet"
    df = dctx.sql(f"COPY ({SELECT}) TO '{target}' STORED AS PARQUET")
    assert f"DataSinkExec writes a single file ({target.as_uri()})" in df.explain_string()
    df.collect()
    assert target.is_file()


def _failing_context(tpch_sf001, threshold: int) -> DistributedContext:
    def explode(keys: pa.Array) -> pa.Array:
        if pc.max(keys).as_py() > threshold:
            raise ValueError("the UDF refused its input")
        return keys

    dctx = DistributedContext(**forced_distribution())
    register_tpch(dctx, tpch_sf001)
    dctx.register_udf(udf(explode, [pa.int64()], pa.int64(), "immutable", "explode"))
    return dctx


def test_a_failing_write_leaves_the_destination_untouched(tpch_sf001, tmp_path):
    with _failing_context(tpch_sf001, threshold=59_000) as dctx:  # only the task with the last orders fails
        fresh = tmp_path / "fresh"
        with pytest.raises(QueryFailed, match="the UDF refused its input"):
            dctx.sql(
                f"COPY (SELECT explode(l_orderkey) AS k FROM lineitem) TO '{fresh}' STORED AS PARQUET"
            ).collect()
        assert not fresh.exists()
        kept = tmp_path / "kept"
        dctx.sql(
            f"COPY (SELECT l_orderkey AS k FROM lineitem LIMIT 5) TO '{kept}/' STORED AS PARQUET"
        ).collect()
        before = files_under(kept)
        with pytest.raises(QueryFailed, match="the UDF refused its input"):
            dctx.sql(
                f"COPY (SELECT explode(l_orderkey) AS k FROM lineitem) TO '{kept}' STORED AS PARQUET"
            ).collect()
        assert files_under(kept) == before
        assert not (kept / STAGING_FOLDER).exists()


def test_a_worker_killed_during_the_write_leaves_it_complete(tpch_sf001, single_node_sf001, tmp_path):
    with slow_cluster(tpch_sf001) as (cluster, dctx):
        query = "SELECT slow(l_orderkey) AS k, l_linenumber, l_shipdate FROM lineitem"
        df = dctx.sql(f"COPY ({query}) TO '{tmp_path / 'out'}' STORED AS PARQUET")
        count = with_a_worker_killed(cluster, df.to_arrow_table)
        retried = [t for s in df.metrics.stages.values() for t in s.tasks if t.attempt > 0]
    expected = single_node_sf001.sql(
        "SELECT l_orderkey AS k, l_linenumber, l_shipdate FROM lineitem"
    ).to_arrow_table()
    assert count.column(0)[0].as_py() == expected.num_rows
    assert_tables_equal(read_back(tmp_path / "out", "PARQUET"), expected)  # complete, nothing twice
    assert_ran_distributed(dctx)
    assert not (tmp_path / "out" / STAGING_FOLDER).exists()
    assert retried, "the kill landed after the write: nothing was retried"
