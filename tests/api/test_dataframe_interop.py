"""DistributedDataFrame as datafusion-python's DataFrame is used: the Arrow stream interface
(pyarrow, polars, DuckDB), iteration, metadata that runs nothing, partitions, cache(), views,
and a closed context. Answers are compared with single-node DataFusion on the same data."""

from __future__ import annotations

import asyncio
import time

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import DataFrame, SessionContext, col, lit
from datafusion import functions as f

from datafusion_distributed import ContextClosed, DistributedConfig, DistributedContext, QueryFailed
from datafusion_distributed.events.handlers import EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.recorder import EventRecorder

ROWS_PER_FILE = 50_000
FILES = 4


@pytest.fixture(scope="module")
def sales_dir(tmp_path_factory):
    """Four Parquet files of 50,000 rows: a result of many batches, read by several tasks."""
    folder = tmp_path_factory.mktemp("sales")
    for k in range(FILES):
        ids = pa.array(range(k * ROWS_PER_FILE, (k + 1) * ROWS_PER_FILE), pa.int64())
        table = pa.table(
            {"id": ids, "region": pa.array(["north", "south", "east", "west"] * (ROWS_PER_FILE // 4))}
        )
        pq.write_table(table, folder / f"part-{k}.parquet")
    return folder


@pytest.fixture(scope="module")
def ctx(sales_dir):
    ctx = SessionContext()
    ctx.register_parquet("sales", str(sales_dir))
    return ctx


@pytest.fixture(scope="module")
def recorder():
    return EventRecorder()


@pytest.fixture(scope="module")
def dctx(ctx, recorder):
    config = DistributedConfig(bytes_per_partition=64 * 1024)  # several tasks even for small files
    with DistributedContext(ctx, config=config, handlers=[recorder]) as dctx:
        yield dctx


QUERY = "SELECT id, region, id * 2 AS twice FROM sales WHERE id % 3 <> 0"
GROUPED = "SELECT region, count(*) AS n, sum(id) AS total FROM sales GROUP BY region ORDER BY region"


def runs_on_workers(df) -> bool:
    """Whether `df`'s plan sends tasks to the workers (more than one task in all)."""
    return sum(len(stage.tasks) for stage in df.distributed_plan().stages) > 1


def finished_queries(recorder: EventRecorder) -> int:
    return sum(e.kind is EventKind.QUERY_FINISHED for e in recorder.events)


def started_queries(recorder: EventRecorder) -> int:
    return sum(e.kind is EventKind.QUERY_STARTED for e in recorder.events)


# -- the Arrow stream interface -----------------------------------------------------------------
@pytest.mark.parametrize("query", [QUERY, GROUPED])
def test_pyarrow_reads_the_arrow_stream_with_single_node_answers(dctx, ctx, query):
    df = dctx.sql(query)
    assert runs_on_workers(df)
    assert_tables_equal(pa.table(df), ctx.sql(query).to_arrow_table())
    assert_ran_distributed(df)


def test_the_arrow_stream_is_read_batch_by_batch_while_the_query_runs(dctx, ctx, recorder):
    df = dctx.sql(QUERY)
    started, finished = started_queries(recorder), finished_queries(recorder)

    reader = pa.RecordBatchReader.from_stream(df)
    assert started_queries(recorder) == started  # nothing runs until a batch is asked for
    assert reader.schema == df.schema()

    first = reader.read_next_batch()
    total = ctx.sql(QUERY).count()
    assert 0 < first.num_rows < total
    assert started_queries(recorder) == started + 1
    assert finished_queries(recorder) == finished  # the query is still handing batches out

    rest = reader.read_all()
    assert first.num_rows + rest.num_rows == total
    assert finished_queries(recorder) == finished + 1


def test_the_arrow_stream_applies_a_requested_schema(dctx):
    df = dctx.sql("SELECT id, region FROM sales WHERE id < 10 ORDER BY id")
    wanted = pa.schema([pa.field("id", pa.int64()), pa.field("region", pa.large_string())])
    capsule = df.__arrow_c_stream__(wanted.__arrow_c_schema__())
    table = pa.RecordBatchReader._import_from_c_capsule(capsule).read_all()
    assert table.schema.field("region").type == pa.large_string()
    assert table.column("id").to_pylist() == list(range(10))


def test_polars_and_duckdb_read_the_arrow_stream(dctx, ctx):
    df = dctx.sql(GROUPED)
    expected = ctx.sql(GROUPED).to_arrow_table()
    assert_tables_equal(pl.DataFrame(df).to_arrow(), expected)
    assert_ran_distributed(df)
    in_duckdb = duckdb.sql("SELECT region, n, total FROM df ORDER BY region").arrow()
    if isinstance(in_duckdb, pa.RecordBatchReader):
        in_duckdb = in_duckdb.read_all()
    assert in_duckdb.to_pylist() == expected.to_pylist()


def test_a_query_that_fails_mid_stream_gives_the_consumer_datafusions_message(dctx):
    df = dctx.sql("SELECT CAST(x AS INT) AS i FROM (VALUES ('1'), ('a')) AS t(x)")
    # An error crosses the Arrow C stream as pyarrow's own exception, with the message kept.
    with pytest.raises(pa.ArrowException, match="Cannot cast string 'a' to value of Int32 type"):
        pa.table(df)


# -- iteration ------------------------------------------------------------------------------------
def test_iteration_yields_arrow_batches_as_they_come(dctx, ctx, recorder):
    df = dctx.sql(QUERY)
    finished = finished_queries(recorder)
    batches = iter(df)
    first = next(batches)
    assert isinstance(first, pa.RecordBatch)
    assert finished_queries(recorder) == finished
    table = pa.Table.from_batches([first, *batches])
    assert finished_queries(recorder) == finished + 1
    assert_tables_equal(table, ctx.sql(QUERY).to_arrow_table())
    assert_ran_distributed(df)


def test_async_iteration_yields_the_same_batches(dctx, ctx):
    df = dctx.sql(QUERY)

    async def read() -> list[pa.RecordBatch]:
        return [batch async for batch in df]

    assert_tables_equal(pa.Table.from_batches(asyncio.run(read())), ctx.sql(QUERY).to_arrow_table())
    assert_ran_distributed(df)


def test_leaving_async_iteration_early_ends_the_query(dctx, recorder):
    df = dctx.sql(QUERY)
    finished = finished_queries(recorder)

    async def first_only() -> pa.RecordBatch:
        batches = aiter(df)
        try:
            return await anext(batches)
        finally:
            await batches.aclose()

    assert asyncio.run(first_only()).num_rows > 0
    for _ in range(100):  # the stream is closed on the reading thread, just after
        if finished_queries(recorder) > finished:
            break
        time.sleep(0.05)
    assert finished_queries(recorder) == finished + 1


# -- metadata: DataFusion's own, nothing runs ---------------------------------------------------
def test_metadata_methods_give_datafusions_answers_and_run_nothing(dctx, ctx, recorder):
    df = dctx.sql(GROUPED)
    plain = ctx.sql(GROUPED)
    started = started_queries(recorder)
    assert df.logical_plan().display_indent() == plain.logical_plan().display_indent()
    assert df.optimized_logical_plan().display_indent() == plain.optimized_logical_plan().display_indent()
    assert df.execution_plan().display_indent() == plain.execution_plan().display_indent()
    assert str(df.parse_sql_expr("n > 1")) == str(plain.parse_sql_expr("n > 1"))
    assert str(df.column("region")) == str(plain.column("region")) == str(df.col("region"))
    assert [str(e) for e in df.find_qualified_columns("n", "total")] == [
        str(e) for e in plain.find_qualified_columns("n", "total")
    ]
    assert df.into_view().schema == plain.into_view().schema
    assert started_queries(recorder) == started


def test_getitem_selects_columns_and_stays_distributed(dctx, ctx):
    df = dctx.table("sales").filter(col("id") < lit(5))
    assert df["id"].to_pydict() == ctx.table("sales").filter(col("id") < lit(5))["id"].to_pydict()
    assert df[["region", "id"]].schema().names == ["region", "id"]


def test_a_distributed_frame_registers_as_a_view(dctx, ctx):
    dctx.register_view("north_view", dctx.sql("SELECT id FROM sales WHERE region = 'north'"))
    dctx.register_table("south_view", dctx.sql("SELECT id FROM sales WHERE region = 'south'").into_view())
    try:
        query = "SELECT (SELECT count(*) FROM north_view) AS north, (SELECT max(id) FROM south_view) AS south"
        df = dctx.sql(query)
        assert runs_on_workers(df)
        plain = ctx.sql(
            "SELECT (SELECT count(*) FROM sales WHERE region = 'north') AS north, "
            "(SELECT max(id) FROM sales WHERE region = 'south') AS south"
        )
        assert df.to_pylist() == plain.to_pylist()
    finally:
        dctx.deregister_table("north_view")
        dctx.deregister_table("south_view")


# -- results -------------------------------------------------------------------------------------
def test_collect_partitioned_is_the_result_as_one_partition(dctx, ctx):
    partitions = dctx.sql(GROUPED).collect_partitioned()
    assert len(partitions) == 1
    assert_tables_equal(pa.Table.from_batches(partitions[0]), ctx.sql(GROUPED).to_arrow_table())
    assert_ran_distributed(dctx)
    streams = dctx.sql(GROUPED).execute_stream_partitioned()
    assert len(streams) == 1
    assert_tables_equal(pa.Table.from_batches(list(streams[0])), ctx.sql(GROUPED).to_arrow_table())
    assert_ran_distributed(dctx)


def test_collect_column_gives_datafusions_array(dctx, ctx):
    query = "SELECT region, id FROM sales WHERE id < 20 ORDER BY id"
    assert dctx.sql(query).collect_column("id") == ctx.sql(query).collect_column("id")
    joined = dctx.table("sales").join(dctx.sql("SELECT 'north' AS r, 1 AS k"), left_on="region", right_on="r")
    assert joined.filter(col("id") < lit(8)).collect_column("k").to_pylist() == [1, 1]


def test_cache_keeps_the_result_so_later_queries_do_not_read_the_source(tmp_path):
    ctx = SessionContext()
    table = pa.table({"a": list(range(10_000)), "b": [i % 7 for i in range(10_000)]})
    (tmp_path / "t").mkdir()
    for half in range(2):
        pq.write_table(table.slice(half * 5_000, 5_000), tmp_path / "t" / f"{half}.parquet")
    ctx.register_parquet("t", str(tmp_path / "t"))
    tables_before = ctx.catalog().schema().names()
    with DistributedContext(ctx, config=DistributedConfig(bytes_per_partition=1)) as dctx:
        cached = dctx.sql("SELECT b, count(*) AS n, sum(a) AS s FROM t GROUP BY b").cache()
        assert_ran_distributed(dctx)  # the query that computed the cache
        expected = ctx.sql("SELECT b, count(*) AS n, sum(a) AS s FROM t GROUP BY b").to_arrow_table()
        for file in (tmp_path / "t").iterdir():
            file.unlink()  # a query that computed it again would fail now
        assert_tables_equal(cached.to_arrow_table(), expected)
        assert cached.filter(col("b") > lit(3)).aggregate([], [f.sum(col("n")).alias("n")]).to_pylist() == [
            {"n": sum(1 for i in range(10_000) if i % 7 > 3)}
        ]
        assert cached.schema() == expected.schema
    assert ctx.catalog().schema().names() == tables_before  # nothing left registered


def test_cache_of_an_empty_result_keeps_its_schema(dctx, ctx):
    cached = dctx.sql("SELECT id, region FROM sales WHERE id < 0").cache()
    assert cached.count() == 0
    assert cached.schema() == ctx.sql("SELECT id, region FROM sales WHERE id < 0").schema()


# -- a closed context -----------------------------------------------------------------------------
def test_a_closed_context_says_so(ctx):
    dctx = DistributedContext(ctx)
    df = dctx.sql("SELECT count(*) AS n FROM sales")
    assert df.to_pylist() == [{"n": FILES * ROWS_PER_FILE}]
    assert not dctx.closed
    dctx.close()
    dctx.close()  # closing again does nothing
    assert dctx.closed
    for run in (df.collect, dctx.sql("SELECT 1").to_pylist, lambda: list(df), lambda: pa.table(df)):
        with pytest.raises(ContextClosed, match="the DistributedContext is closed"):
            run()
    assert issubclass(ContextClosed, QueryFailed)
    assert isinstance(dctx.sql("SELECT 1").df, DataFrame)  # planning alone still works
