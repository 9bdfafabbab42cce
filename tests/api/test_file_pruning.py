"""Files of Delta and Iceberg tables skipped by their statistics while the query is planned,
before any task starts: each answer compared with the table's own reader's rows queried by a
single-node SessionContext, each plan checked for what it skipped and that it ran as tasks."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.forced import forced_distribution

deltalake = pytest.importorskip("deltalake")
sql_catalog = pytest.importorskip("pyiceberg.catalog.sql")

FILES = 8
LONG = "z" * 40  # longer than the 32 characters a Delta writer may cut a bound to


def _part(i: int) -> pa.Table:
    """The rows of file `i`: 100 values of `a` from i*100, a day each, strings and times within
    a millisecond of each other; file 0 holds the long string, file 1 no `a` at all."""
    a = pa.array([None] * 100 if i == 1 else range(i * 100, i * 100 + 100), pa.int64())
    return pa.table({
        "a": a,
        "s": [LONG if (i, j) == (0, 0) else f"k{i}" for j in range(100)],
        "d": [date(2024, 1, 1) + timedelta(days=i)] * 100,
        "ts": pa.array([datetime(2024, 1, 1, 0, 0, i, 500) + timedelta(microseconds=j) for j in range(100)], pa.timestamp("us")),
        "f": [float(i)] * 100,
    })  # fmt: skip


# (query, files of FILES its filter cannot match by their statistics)
QUERIES = [
    (
        "SELECT count(*) AS n, sum(a) AS s FROM t WHERE a BETWEEN 250 AND 419",
        5,
    ),  # files 2, 3, 4 kept (1: nulls)
    ("SELECT count(*) AS n FROM t WHERE s = 'k3'", 6),  # file 0's maximum, the long string, unknown
    ("SELECT count(*) AS n FROM t WHERE d >= DATE '2024-01-07'", 6),
    ("SELECT count(*) AS n FROM t WHERE a IN (5, 750)", 6),
    ("SELECT count(*) AS n FROM t WHERE a IS NULL", 7),
    # a bound kept to the millisecond below: a time within that millisecond still matches
    ("SELECT count(*) AS n FROM t WHERE ts > TIMESTAMP '2024-01-01 00:00:03.000550'", 3),
    # a long string's maximum may be cut short: its file (0) is kept
    (f"SELECT count(*) AS n FROM t WHERE s >= '{'z' * 35}'", 7),
    # the formats leave NaN out of a float's bounds, and DataFusion puts NaN above every number
    ("SELECT count(*) AS n FROM t WHERE f > 5", 0),
    ("SELECT count(*) AS n FROM t WHERE a + 1 > 10", 0),  # an expression on the column
]


@pytest.fixture(scope="module")
def delta_path(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("pruned") / "delta")
    for i in range(FILES):
        deltalake.write_deltalake(path, _part(i), mode="append")
    return path


@pytest.fixture(scope="module")
def iceberg_catalog(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pruned-iceberg")
    catalog = sql_catalog.SqlCatalog("c", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=_part(0).schema)
    for i in range(FILES):
        table.append(_part(i))
    return catalog


def _oracle(rows: pa.Table) -> SessionContext:
    ctx = SessionContext()
    ctx.register_record_batches("t", [rows.to_batches()])
    return ctx


def _skips(dctx: DistributedContext, oracle: SessionContext, sql: str, skipped: int) -> None:
    """`sql` answers as the oracle does, its plan skipping `skipped` files: as several tasks,
    or, with one file left, as one task here whose plan reads that file only."""
    df = dctx.sql(sql)
    assert_tables_equal(df.to_arrow_table(), oracle.sql(sql).to_arrow_table(), sql=sql)
    plan = df.distributed_plan()
    assert plan.pruned == (f"t: {skipped} of {FILES} files skipped by statistics",)
    if skipped == FILES - 1:
        assert_ran_on_one_node(df)
        assert plan.physical is not None and plan.physical.display_indent().count(".parquet") == 1
    else:
        assert_ran_distributed(df)
        assert f"files: t: {skipped} of {FILES}" in df.explain_string()


@pytest.mark.parametrize(("sql", "skipped"), QUERIES)
def test_delta_files_the_filter_cannot_match_are_skipped(delta_path, sql, skipped):
    oracle = _oracle(deltalake.DeltaTable(delta_path).to_pyarrow_table())
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_delta("t", delta_path)
        _skips(dctx, oracle, sql, skipped)


@pytest.mark.parametrize(("sql", "skipped"), QUERIES)
def test_iceberg_files_the_filter_cannot_match_are_skipped(iceberg_catalog, sql, skipped):
    oracle = _oracle(iceberg_catalog.load_table("db.t").scan().to_arrow())
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_iceberg("t", "db.t", catalog=iceberg_catalog)
        _skips(dctx, oracle, sql, skipped)


def test_tasks_are_counted_for_the_files_left(delta_path):
    """A stage splits over no more tasks than it has files left to read."""
    with DistributedContext(**forced_distribution(embedded_workers=4)) as dctx:
        dctx.register_delta("t", delta_path)
        every = dctx.sql("SELECT count(*) FROM t WHERE a >= 0").distributed_plan()
        three = dctx.sql("SELECT count(*) FROM t WHERE a >= 500").distributed_plan()
    assert three.pruned == (f"t: {FILES - 3} of {FILES} files skipped by statistics",)
    assert (every.stages[0].task_count, three.stages[0].task_count) == (4, 3)


def test_worker_processes_read_only_the_files_left(delta_path):
    oracle = _oracle(deltalake.DeltaTable(delta_path).to_pyarrow_table())
    with (
        LocalCluster(2, share_spools=False) as cluster,
        DistributedContext(workers=cluster, **forced_distribution()) as dctx,
    ):
        dctx.register_delta("t", delta_path)
        _skips(dctx, oracle, QUERIES[0][0], QUERIES[0][1])


def test_a_table_registered_again_is_pruned_with_its_new_statistics(tmp_path):
    path = str(tmp_path / "again")
    deltalake.write_deltalake(path, _part(0))
    with DistributedContext(**forced_distribution()) as dctx:
        dctx.register_delta("t", path)
        deltalake.write_deltalake(path, _part(5), mode="append")
        dctx.deregister_table("t")
        dctx.register_delta("t", path)
        df = dctx.sql("SELECT count(*) AS n FROM t WHERE a >= 500")
        assert df.to_pylist() == [{"n": 100}]
        assert df.distributed_plan().pruned == ("t: 1 of 2 files skipped by statistics",)
        assert_ran_on_one_node(df)  # one file left: one task
