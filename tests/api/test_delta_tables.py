"""Delta Lake tables read distributed (`register_delta`), each query compared with the same
snapshot read by deltalake's own provider in a plain single-node SessionContext."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, LocalCluster, QueryFailed
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.forced import forced_distribution

deltalake = pytest.importorskip("deltalake")
DeltaTable = deltalake.DeltaTable
write_deltalake = deltalake.write_deltalake

QUERIES = [
    "SELECT p, count(*) AS n, sum(a) AS sa, sum(b) AS sb FROM t GROUP BY p ORDER BY p",
    "SELECT a, p, b FROM t WHERE p = 'k1' AND a % 7 = 0 ORDER BY a",
    "SELECT count(*) AS n, min(a) AS lo, max(a) AS hi FROM t WHERE b IS NULL",
]


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A partitioned table of 4 versions: written, appended, a delete (files rewritten), a column
    added by a merge of schemas; and the time just after version 1."""
    path = str(tmp_path_factory.mktemp("delta") / "t")
    write_deltalake(
        path, pa.table({"a": range(300), "p": [f"k{i % 3}" for i in range(300)]}), partition_by=["p"]
    )
    write_deltalake(
        path, pa.table({"a": range(300, 400), "p": ["k1"] * 100}), partition_by=["p"], mode="append"
    )
    time.sleep(0.05)
    after_v1 = datetime.now(timezone.utc)
    time.sleep(0.05)
    DeltaTable(path).delete("a < 50 OR a >= 390")
    extra = pa.table({"a": [1000, 1001, 1002], "p": ["k9", "k9", "k1"], "b": [1.5, None, 2.5]})
    write_deltalake(path, extra, partition_by=["p"], mode="append", schema_mode="merge")
    assert DeltaTable(path).version() == 3
    return path, after_v1


def _oracle(path: str, version: int | datetime | None = None) -> SessionContext:
    ctx = SessionContext()
    table = DeltaTable(path)
    if version is not None:
        table.load_as_version(version)
    ctx.register_table("t", table)
    return ctx


def _same_as_deltalake(
    dctx: DistributedContext, oracle: SessionContext, sql: str, distributed: bool = True
) -> None:
    df = dctx.sql(sql)
    assert_tables_equal(df.to_arrow_table(), oracle.sql(sql).to_arrow_table(), sql=sql)
    if distributed:
        assert_ran_distributed(df)
    else:
        assert_ran_on_one_node(df)


@pytest.mark.parametrize("sql", QUERIES)
def test_the_latest_snapshot_reads_as_deltalake_reads_it_split_across_tasks(history, sql):
    path, _ = history
    with DistributedContext(**forced_distribution()) as dctx:
        registered = dctx.register_delta("t", path)
        assert (registered.version, registered.reason) == (3, "")
        _same_as_deltalake(dctx, _oracle(path), sql, distributed="k1" not in sql)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_time_travel_by_version_reads_that_snapshot(history, version):
    path, _ = history
    with DistributedContext(**forced_distribution()) as dctx:
        assert dctx.register_delta("t", DeltaTable(path), version=version).version == version
        sql = "SELECT p, count(*) AS n, sum(a) AS sa FROM t GROUP BY p ORDER BY p"
        _same_as_deltalake(dctx, _oracle(path, version), sql)
    assert DeltaTable(path).version() == 3


def test_time_travel_by_timestamp_reads_the_version_then_current(history):
    path, after_v1 = history
    with DistributedContext(**forced_distribution()) as dctx:
        assert dctx.register_delta("t", path, version=after_v1).version == 1
        _same_as_deltalake(dctx, _oracle(path, 1), "SELECT count(*) AS n, sum(a) AS sa FROM t")


def test_a_partition_filter_prunes_files_before_any_task_starts(history):
    path, _ = history
    with DistributedContext(**forced_distribution()) as dctx:
        registered = dctx.register_delta("t", path)
        plan = dctx.sql("SELECT a FROM t WHERE p = 'k9'").distributed_plan()
        scanned = [n.line for s in plan.stages for n in s.root.walk() if n.name == "DataSourceExec"]
        assert registered.files > 3 and len(scanned) == 1 and "p=k9" in scanned[0], scanned


def test_worker_processes_read_the_snapshot(history):
    path, _ = history
    with (
        LocalCluster(2, share_spools=False) as cluster,
        DistributedContext(workers=cluster, **forced_distribution()) as dctx,
    ):
        dctx.register_delta("t", path)
        _same_as_deltalake(dctx, _oracle(path), QUERIES[0])


def test_column_mapping_reads_columns_by_their_logical_names(tmp_path):
    path = str(tmp_path / "mapped")
    config = {
        "delta.columnMapping.mode": "name",
        "delta.minReaderVersion": "2",
        "delta.minWriterVersion": "5",
    }
    write_deltalake(
        path,
        pa.table({"Amount": range(40), "p": [i % 2 for i in range(40)]}),
        partition_by=["p"],
        configuration=config,
    )
    write_deltalake(
        path, pa.table({"Amount": range(40, 60), "p": [1] * 20}), partition_by=["p"], mode="append"
    )
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_delta("t", path)
        _same_as_deltalake(
            dctx, _oracle(path), 'SELECT p, sum("Amount") AS s, count(*) AS n FROM t GROUP BY p ORDER BY p'
        )


def test_an_empty_table_registers_with_its_schema(tmp_path):
    path = str(tmp_path / "empty")
    DeltaTable.create(path, schema=pa.schema([("a", pa.int64()), ("s", pa.string())]))
    with DistributedContext() as dctx:
        assert dctx.register_delta("t", path).files == 0
        assert dctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 0}]
        assert dctx.sql("SELECT * FROM t").to_arrow_table().schema.names == ["a", "s"]


def test_deltalake_s_own_provider_runs_on_one_node_naming_register_delta(history):
    path, _ = history
    ctx = _oracle(path)
    with DistributedContext(ctx, **forced_distribution()) as dctx:
        df = dctx.sql(QUERIES[0])
        assert "register_delta" in df.distributed_plan().single_node
        _same_as_deltalake(dctx, _oracle(path), QUERIES[0], distributed=False)


def test_a_missing_table_or_version_is_an_error_naming_it(history, tmp_path):
    path, _ = history
    with DistributedContext() as dctx:
        with pytest.raises(QueryFailed, match=f"Delta table {tmp_path / 'none'}"):
            dctx.register_delta("t", tmp_path / "none")
        with pytest.raises(QueryFailed, match="Delta table"):
            dctx.register_delta("t", path, version=99)


# -- writing: tasks write the files, one commit ------------------------------------------------

SOURCE = "SELECT id, region, CASE WHEN id % 5 = 0 THEN NULL ELSE region END AS r2 FROM src"


def _source(dctx: DistributedContext, tmp_path) -> pa.Table:
    path = str(tmp_path / "src")
    rows = pa.table({"id": range(600), "region": [("eu", "us", "apac")[i % 3] for i in range(600)]})
    write_deltalake(path, rows, partition_by=["region"])
    dctx.register_delta("src", path)
    return dctx.sql(SOURCE).to_arrow_table()


def _read_back(path: str, version: int | None = None) -> pa.Table:
    ctx = _oracle(path, version)  # kept while its provider reads: deltalake's scan calls back into it
    return ctx.sql("SELECT id, region, r2 FROM t").to_arrow_table()


def test_a_write_is_one_commit_of_the_files_every_task_wrote(tmp_path):
    target = str(tmp_path / "target")
    with DistributedContext(**forced_distribution()) as dctx:
        expected = _source(dctx, tmp_path)
        df = dctx.sql(SOURCE)
        assert df.write_delta(target, partition_by=["r2"]) == 1  # 0: the new table, empty
        assert_ran_distributed(dctx)
        table = DeltaTable(target)
        assert table.metadata().partition_columns == ["r2"]
        assert len(table.file_uris()) >= 4  # a file per partition value and task at least
        assert_tables_equal(_read_back(target), expected)  # nulls of r2 read back as nulls
        assert df.write_delta(target) == 2
        assert _read_back(target).num_rows == 2 * expected.num_rows
        assert df.write_delta(target, mode="overwrite") == 3
        assert_tables_equal(_read_back(target), expected)
        assert_tables_equal(_read_back(target, 1), expected)  # earlier versions stay readable


def test_a_failed_write_leaves_the_table_at_its_version_and_no_files(tmp_path):
    target = str(tmp_path / "target")
    with DistributedContext(**forced_distribution()) as dctx:
        _source(dctx, tmp_path)
        dctx.sql(SOURCE).write_delta(target)
        before = sorted(p.name for p in (tmp_path / "target").iterdir())
        failing = dctx.sql(
            "SELECT id, region, CAST(CASE WHEN id = 599 THEN 'x' ELSE r2 END AS INT) AS r2 FROM ("
            + SOURCE
            + ")"
        )
        with pytest.raises(QueryFailed):
            failing.write_delta(target)
        assert DeltaTable(target).version() == 1
        assert sorted(p.name for p in (tmp_path / "target").iterdir()) == before


def test_a_conflicting_concurrent_commit_is_refused_not_overwritten(tmp_path):
    from datafusion_distributed.api import delta

    target = str(tmp_path / "target")
    write_deltalake(target, pa.table({"id": [1, 2]}))
    with DistributedContext(**forced_distribution()) as dctx:
        df = dctx.sql("SELECT CAST(id AS BIGINT) AS id FROM generate_series(10, 20) AS s(id)")

        def write_then_someone_else_commits(folder, partitions):
            df._copy_to(folder, "PARQUET", {}, None)
            write_deltalake(target, pa.table({"id": [3]}), mode="overwrite")  # version 1

        with pytest.raises(QueryFailed, match="the write was not committed"):
            delta.write_delta(write_then_someone_else_commits, df.schema(), target, "overwrite", None, None)
    assert DeltaTable(target).version() == 1
    assert pa.table(DeltaTable(target).to_pyarrow_table()).column("id").to_pylist() == [3]
    assert not [p for p in (tmp_path / "target").iterdir() if p.name.startswith("distributed-write-")]


def test_bad_write_arguments_are_refused_before_anything_is_written(tmp_path):
    target = str(tmp_path / "target")
    write_deltalake(target, pa.table({"id": [1], "p": ["a"]}), partition_by=["p"])
    with DistributedContext() as dctx:
        df = dctx.sql("SELECT 2 AS id, 'b' AS p")
        with pytest.raises(ValueError, match=r"partitioned by \['p'\], not \['id'\]"):
            df.write_delta(target, partition_by="id")
        with pytest.raises(ValueError, match="mode must be one of"):
            df.write_delta(target, mode="merge")
        with pytest.raises(ValueError, match="local tables and tables in S3"):
            df.write_delta("gs://bucket/table")
    assert DeltaTable(target).version() == 0


def test_column_names_with_capitals_and_dots_read_as_written(tmp_path):
    path = str(tmp_path / "names")
    rows = pa.table({"Amount": range(30), "a.b": range(30, 60), "P": [("x", "y")[i % 2] for i in range(30)]})
    write_deltalake(path, rows, partition_by=["P"])
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_delta("t", path)
        sql = 'SELECT "P", sum("Amount") AS s, max("a.b") AS m FROM t GROUP BY "P" ORDER BY "P"'
        _same_as_deltalake(dctx, _oracle(path), sql)


def test_worker_processes_write_one_commit(tmp_path):
    target = str(tmp_path / "target")
    with (
        LocalCluster(2, share_spools=False) as cluster,
        DistributedContext(workers=cluster, **forced_distribution()) as dctx,
    ):
        expected = _source(dctx, tmp_path)
        assert dctx.sql(SOURCE).write_delta(target, partition_by=["r2"]) == 1
        assert_ran_distributed(dctx)
        assert_tables_equal(_read_back(target), expected)


def test_a_table_in_an_s3_bucket_reads_through_the_context_s_store(history):
    from tests.support.s3_server import LocalS3Server

    path, _ = history
    with LocalS3Server() as s3:
        s3.create_bucket("lake")
        s3.upload_folder(path, "lake", "orders")
        options = s3.storage_options()
        with DistributedContext(**forced_distribution()) as dctx:
            dctx.register_object_store("s3://lake", s3.store("lake"))
            assert dctx.register_delta("t", "s3://lake/orders", storage_options=options).version == 3
            _same_as_deltalake(dctx, _oracle(path), QUERIES[0])


def test_a_worker_killed_during_a_write_leaves_one_complete_commit(tpch_sf001, single_node_sf001, tmp_path):
    from tests.support.killed_writes import retried_attempts, slow_cluster, with_a_worker_killed

    target = str(tmp_path / "target")
    with slow_cluster(tpch_sf001) as (cluster, dctx):
        df = dctx.sql("SELECT slow(l_orderkey) AS k, l_linenumber, l_returnflag FROM lineitem")
        assert (
            with_a_worker_killed(cluster, lambda: df.write_delta(target, partition_by=["l_returnflag"])) == 1
        )
        retried = retried_attempts(dctx)
    expected = single_node_sf001.sql("SELECT l_orderkey AS k, l_linenumber, l_returnflag FROM lineitem")
    oracle = _oracle(target)  # kept while its provider reads
    got = oracle.sql("SELECT k, l_linenumber, l_returnflag FROM t").to_arrow_table()
    assert_tables_equal(got, expected.to_arrow_table())  # complete, nothing twice, one commit
    assert_ran_distributed(dctx)
    assert retried, "the kill landed after the write: nothing was retried"


def test_a_table_in_an_s3_bucket_is_written_as_one_commit(tmp_path):
    from tests.support.s3_server import LocalS3Server

    with LocalS3Server() as s3:
        s3.create_bucket("lake")
        options = s3.storage_options()
        with DistributedContext(**forced_distribution()) as dctx:
            dctx.register_object_store("s3://lake", s3.store("lake"))
            expected = _source(dctx, tmp_path)
            df = dctx.sql(SOURCE)
            assert df.write_delta("s3://lake/target", partition_by=["r2"], storage_options=options) == 1
            assert_ran_distributed(dctx)
            assert df.write_delta("s3://lake/target", storage_options=options) == 2
        table = DeltaTable("s3://lake/target", storage_options=options)
        assert_tables_equal(pa.table(table.to_pyarrow_table()), pa.concat_tables([expected, expected]))
