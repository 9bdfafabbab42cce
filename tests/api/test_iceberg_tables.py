"""Apache Iceberg tables read distributed (`register_iceberg`), each query compared with the same
snapshot read by pyiceberg itself."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datafusion_distributed import DistributedContext, LocalCluster, QueryFailed
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import forced_distribution
from tests.support.killed_writes import (
    register_slow_tpch,
    retried_attempts,
    slow_cluster,
    with_a_worker_killed,
)

sql_catalog = pytest.importorskip("pyiceberg.catalog.sql")
types = pytest.importorskip("pyiceberg.types")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """A table of 4 snapshots: written partitioned by region, appended to, a column renamed and
    one added (schema evolution by field id), then a delete (copy-on-write: files rewritten)."""
    folder = tmp_path_factory.mktemp("iceberg")
    catalog = sql_catalog.SqlCatalog(
        "test", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}"
    )
    catalog.create_namespace("db")
    rows = pa.table(
        {"id": pa.array(range(300), pa.int64()), "region": [("eu", "us", "apac")[i % 3] for i in range(300)]}
    )
    table = catalog.create_table("db.orders", schema=rows.schema)
    with table.update_spec() as spec:
        spec.add_identity("region")
    table.append(rows)
    table.append(pa.table({"id": pa.array(range(300, 360), pa.int64()), "region": ["eu"] * 60}))
    with table.update_schema() as schema:
        schema.rename_column("id", "order_id")
        schema.add_column("amount", types.DoubleType())
    table.append(
        pa.table({
            "order_id": pa.array([1000, 1001], pa.int64()),
            "region": ["us", "eu"],
            "amount": pa.array([2.5, None], pa.float64()),
        })
    )  # fmt: skip
    table.delete("order_id < 30")
    return catalog


def _snapshots(catalog) -> list[int]:
    return [s.snapshot_id for s in catalog.load_table("db.orders").snapshots()]


def _same_as_pyiceberg(dctx: DistributedContext, catalog, snapshot_id: int | None, sql: str) -> None:
    """`sql` over `t` answers through `dctx` as over pyiceberg's own read of the snapshot."""
    from datafusion import SessionContext

    oracle = SessionContext()
    read = catalog.load_table("db.orders").scan(snapshot_id=snapshot_id).to_arrow()
    oracle.register_record_batches("t", [read.to_batches()])
    df = dctx.sql(sql)
    assert_tables_equal(df.to_arrow_table(), oracle.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)


def test_the_current_snapshot_reads_renamed_added_and_partition_columns(catalog):
    with DistributedContext(**forced_distribution()) as dctx:
        registered = dctx.register_iceberg("t", "db.orders", catalog=catalog)
        assert registered.snapshot_id == _snapshots(catalog)[-1] and registered.reason == ""
        sql = "SELECT region, count(*) AS n, sum(order_id) AS s, sum(amount) AS a FROM t GROUP BY region ORDER BY region"
        _same_as_pyiceberg(dctx, catalog, None, sql)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_time_travel_reads_each_snapshot_with_its_schema(catalog, index):
    snapshot_id = _snapshots(catalog)[index]
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_iceberg("t", catalog.load_table("db.orders"), snapshot_id=snapshot_id)
        key = "id" if index < 2 else "order_id"  # renamed before the third snapshot
        _same_as_pyiceberg(
            dctx,
            catalog,
            snapshot_id,
            f"SELECT region, count(*) AS n, sum({key}) AS s FROM t GROUP BY region",
        )


def test_an_identity_partition_filter_prunes_files_before_any_task_starts(catalog):
    with DistributedContext(**forced_distribution()) as dctx:
        registered = dctx.register_iceberg("t", "db.orders", catalog=catalog)
        plan = dctx.sql("SELECT sum(order_id) AS s FROM t WHERE region = 'apac'").distributed_plan()
        scanned = {n.line for s in plan.stages for n in s.root.walk() if n.name == "DataSourceExec"}
        assert registered.files > len(scanned) >= 1 and all("region=apac" in line for line in scanned), (
            scanned
        )


def test_worker_processes_read_the_snapshot(catalog):
    with (
        LocalCluster(2, share_spools=False) as cluster,
        DistributedContext(workers=cluster, **forced_distribution()) as dctx,
    ):
        dctx.register_iceberg("t", "db.orders", catalog=catalog)
        _same_as_pyiceberg(
            dctx, catalog, None, "SELECT region, count(*) AS n, max(order_id) AS top FROM t GROUP BY region"
        )


def test_a_table_by_name_needs_its_catalog_and_a_missing_one_is_named(catalog):
    with DistributedContext() as dctx:
        with pytest.raises(ValueError, match="needs its catalog"):
            dctx.register_iceberg("t", "db.orders")
        with pytest.raises(QueryFailed, match="Iceberg table db.missing"):
            dctx.register_iceberg("t", "db.missing", catalog=catalog)


# -- writing: tasks write the files, one transaction ---------------------------------------------

ROWS = "SELECT order_id AS id, region FROM src"  # the table above, read as several tasks


@pytest.fixture
def empty(catalog, request):
    """A new table (id, region) partitioned by region, named after the test."""
    name = f"db.{request.node.name.replace('[', '_').replace(']', '')[:40]}"
    table = catalog.create_table(name, schema=pa.schema([("id", pa.int64()), ("region", pa.string())]))
    with table.update_spec() as spec:
        spec.add_identity("region")
    return catalog.load_table(name)


def _read(catalog, table) -> pa.Table:
    return catalog.load_table(table.name()).scan().to_arrow()


def test_a_write_is_one_transaction_of_the_files_every_task_wrote(catalog, empty):
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_iceberg("src", "db.orders", catalog=catalog)
        df = dctx.sql(ROWS)
        expected = df.to_arrow_table()
        first = df.write_iceberg(empty)
        assert_ran_distributed(dctx)
        assert_tables_equal(_read(catalog, empty), expected)
        files = list(catalog.load_table(empty.name()).scan().plan_files())
        assert {str(task.file.partition) for task in files} == {"Record[apac]", "Record[eu]", "Record[us]"}
        df.write_iceberg(empty.name(), catalog=catalog)
        assert _read(catalog, empty).num_rows == 2 * expected.num_rows
        df.write_iceberg(catalog.load_table(empty.name()), mode="overwrite")
        assert_tables_equal(_read(catalog, empty), expected)
        assert (
            catalog.load_table(empty.name()).scan(snapshot_id=first).to_arrow().num_rows == expected.num_rows
        )


def test_a_failed_write_commits_nothing_and_leaves_no_files(catalog, empty):
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_iceberg("src", "db.orders", catalog=catalog)
        dctx.sql(ROWS).write_iceberg(empty)
        before = catalog.load_table(empty.name()).current_snapshot().snapshot_id
        data = empty.location().removeprefix("file://") + "/data"
        folders = sorted(os.listdir(data))
        failing = dctx.sql(
            "SELECT CAST(CASE WHEN id = 99 THEN 'x' ELSE '1' END AS BIGINT) AS id, region FROM (" + ROWS + ")"
        )
        with pytest.raises(QueryFailed):
            failing.write_iceberg(catalog.load_table(empty.name()))
        assert catalog.load_table(empty.name()).current_snapshot().snapshot_id == before
        assert sorted(os.listdir(data)) == folders


def test_a_concurrent_commit_is_refused_not_overwritten(catalog, empty):
    stale = catalog.load_table(empty.name())
    catalog.load_table(empty.name()).append(pa.table({"id": pa.array([7], pa.int64()), "region": ["eu"]}))
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_iceberg("src", "db.orders", catalog=catalog)
        with pytest.raises(QueryFailed, match="the write was not committed"):
            dctx.sql(ROWS).write_iceberg(stale, mode="overwrite")
    assert _read(catalog, empty).column("id").to_pylist() == [7]
    data = empty.location().removeprefix("file://") + "/data"
    assert not [name for name in os.listdir(data) if name.startswith("distributed-write-")]


def _transformed(catalog, name: str, fields) -> object:
    """A new table of (id, name, ts, tsz, d) partitioned by `fields`, (source, transform) pairs."""
    schema = pa.schema([
        ("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("us")),
        ("tsz", pa.timestamp("us", tz="UTC")), ("d", pa.date32()),
    ])  # fmt: skip
    table = catalog.create_table(name, schema=schema)
    with table.update_spec() as spec:
        for source, transform in fields:
            spec.add_field(source, transform, f"{source}_{str(transform).split('[')[0]}")
    return catalog.load_table(name)


TRANSFORMED_ROWS = """
    SELECT id, 'name-' || CAST(id % 7 AS VARCHAR) || '-x' AS name,
           to_timestamp_micros(1703973600000000 + id * 5820000000) AS ts,
           arrow_cast(to_timestamp_micros(1703973600000000 + id * 25200000000), 'Timestamp(Microsecond, Some("UTC"))') AS tsz,
           CAST(DATE '2023-11-20' + CAST(id AS INT) AS DATE) AS d
    FROM (SELECT order_id - 20 AS id FROM src)
"""


@pytest.mark.parametrize(
    "fields",
    [
        [("ts", "day"), ("name", "truncate6")],
        [("tsz", "hour"), ("id", "truncate10")],
        [("d", "month"), ("ts", "year")],
    ],
    ids=["day+truncate-string", "hour-of-utc+truncate-int", "month+year"],
)
def test_a_table_partitioned_by_transforms_is_written_one_partition_a_file(catalog, fields, request):
    from pyiceberg.transforms import (
        DayTransform,
        HourTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )

    made = {
        "day": DayTransform(),
        "hour": HourTransform(),
        "month": MonthTransform(),
        "year": YearTransform(),
    }
    specs = [
        (source, made.get(kind) or TruncateTransform(int(kind.removeprefix("truncate"))))
        for source, kind in fields
    ]
    table = _transformed(
        catalog, f"db.t_{request.node.callspec.id.replace('-', '_').replace('+', '_')}", specs
    )
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_iceberg("src", "db.orders", catalog=catalog)
        df = dctx.sql(TRANSFORMED_ROWS)
        expected = df.to_arrow_table()
        df.write_iceberg(table)
        assert_ran_distributed(dctx)
    written = catalog.load_table(table.name())
    assert_tables_equal(written.scan().to_arrow(), expected)
    # pyiceberg read each file's partition from its statistics: one value a file, as it holds
    files = list(written.scan().plan_files())
    partitions = {tuple(task.file.partition) for task in files}
    assert len(partitions) > 3 and len(files) >= len(partitions)
    for task in files:
        rows = pq.read_table(task.file.file_path.removeprefix("file://"))
        for (source, transform), value in zip(specs, task.file.partition, strict=True):
            column = written.schema().find_field(source)
            values = {transform.transform(column.field_type)(v) for v in _iceberg_values(rows.column(source))}
            assert values == {value}, (source, transform, values, value)


def _iceberg_values(column: pa.ChunkedArray) -> list:
    """A column's values as pyiceberg's transforms take them (micros, days, strings, ints)."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        return column.cast(pa.int64()).to_pylist()
    if pa.types.is_date(kind):
        return column.cast(pa.int32()).to_pylist()
    return column.to_pylist()


def test_a_spec_whose_partitions_files_cannot_show_is_refused_before_anything_is_written(catalog):
    from pyiceberg.transforms import BucketTransform

    table = catalog.create_table("db.bucketed", schema=pa.schema([("id", pa.int64())]))
    with table.update_spec() as spec:
        spec.add_field("id", BucketTransform(4), "id_bucket")
    with DistributedContext() as dctx, pytest.raises(ValueError, match=r"partitioned by bucket\[4\] of id"):
        dctx.sql("SELECT CAST(1 AS BIGINT) AS id").write_iceberg(catalog.load_table("db.bucketed"))
    assert catalog.load_table("db.bucketed").current_snapshot() is None


def test_a_snapshot_with_delete_files_is_read_by_pyiceberg_and_says_so(catalog, monkeypatch):
    from types import SimpleNamespace

    from datafusion_distributed.api import iceberg

    planned = iceberg.planned_files
    # pyiceberg writes no delete files (its deletes rewrite files): say one file has some
    monkeypatch.setattr(
        iceberg,
        "planned_files",
        lambda scan: [SimpleNamespace(file=t.file, delete_files={"deletes.parquet"}) for t in planned(scan)],
    )
    with DistributedContext(**forced_distribution()) as dctx:
        registered = dctx.register_iceberg("t", "db.orders", catalog=catalog)
        assert "delete files, which pyiceberg applies" in registered.reason
        _same_as_pyiceberg(
            dctx, catalog, None, "SELECT region, count(*) AS n, sum(order_id) AS s FROM t GROUP BY region"
        )


def test_worker_processes_write_one_transaction(catalog, empty):
    with (
        LocalCluster(2, share_spools=False) as cluster,
        DistributedContext(workers=cluster, **forced_distribution()) as dctx,
    ):
        dctx.register_iceberg("src", "db.orders", catalog=catalog)
        df = dctx.sql(ROWS)
        df.write_iceberg(empty)
        assert_ran_distributed(dctx)
        assert_tables_equal(_read(catalog, empty), df.to_arrow_table())


def test_a_table_in_an_s3_bucket_is_read_and_written_through_the_context_s_store(tmp_path):
    from tests.support.s3_server import LocalS3Server

    with LocalS3Server() as s3:
        s3.create_bucket("lake")
        catalog = sql_catalog.SqlCatalog(
            "s3",
            uri=f"sqlite:///{tmp_path}/catalog.db",
            warehouse="s3://lake/warehouse",
            **s3.iceberg_properties(),
        )
        catalog.create_namespace("db")
        rows = pa.table(
            {"id": pa.array(range(200), pa.int64()), "region": [("eu", "us")[i % 2] for i in range(200)]}
        )
        table = catalog.create_table("db.orders", schema=rows.schema)
        with table.update_spec() as spec:
            spec.add_identity("region")
        table.append(rows)
        table.append(rows)
        with DistributedContext(**forced_distribution()) as dctx:
            dctx.register_object_store("s3://lake", s3.store("lake"))
            assert dctx.register_iceberg("t", "db.orders", catalog=catalog).files == 4
            sql = "SELECT region, count(*) AS n, sum(id) AS s FROM t GROUP BY region ORDER BY region"
            _same_as_pyiceberg(dctx, catalog, None, sql)  # pyiceberg reads the bucket itself
            copy = catalog.create_table("db.copy", schema=rows.schema)
            with copy.update_spec() as spec:
                spec.add_identity("region")
            dctx.sql("SELECT id, region FROM t").write_iceberg(catalog.load_table("db.copy"))
            written = catalog.load_table("db.copy").scan().to_arrow()
            assert_tables_equal(written, dctx.sql("SELECT id, region FROM t").to_arrow_table())
            assert written.num_rows == 400


SLOW_ROWS = "SELECT slow(l_orderkey) AS id, l_returnflag AS region FROM lineitem"  # see killed_writes


def test_a_worker_killed_during_a_write_leaves_one_complete_transaction(
    catalog, empty, tpch_sf001, single_node_sf001
):
    with slow_cluster(tpch_sf001) as (cluster, dctx):
        with_a_worker_killed(cluster, lambda: dctx.sql(SLOW_ROWS).write_iceberg(empty))
        retried = retried_attempts(dctx)
    expected = single_node_sf001.sql("SELECT l_orderkey AS id, l_returnflag AS region FROM lineitem")
    assert_tables_equal(_read(catalog, empty), expected.to_arrow_table())  # complete, nothing twice
    assert len(catalog.load_table(empty.name()).snapshots()) == 1
    assert_ran_distributed(dctx)
    assert retried, "the kill landed after the write: nothing was retried"


def test_a_write_cancelled_by_its_timeout_commits_nothing_and_leaves_no_files(catalog, empty, tpch_sf001):
    from datafusion_distributed import QueryTimedOut

    with DistributedContext(**forced_distribution(query_timeout=0.5)) as dctx:
        register_slow_tpch(dctx.ctx, tpch_sf001)
        with pytest.raises(QueryTimedOut):
            dctx.sql(SLOW_ROWS).write_iceberg(empty)
    assert catalog.load_table(empty.name()).current_snapshot() is None
    data = empty.location().removeprefix("file://") + "/data"
    assert not os.path.exists(data) or not os.listdir(data)
