"""A feed of Parquet files (`read="parquet"`): its units are file paths that the tasks read
with DataFusion's own Parquet reader, in rounds where the stage's plan allows it. Every answer
is single-node DataFusion's over the same files registered as a Parquet table."""

from __future__ import annotations

import itertools
import os
import re
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext
from feed_helpers import cancel_once, check

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    FeedFailed,
    QueryCancelled,
    read_units,
)
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

SCHEMA = pa.schema([("id", pa.int64()), ("grp", pa.string()), ("amount", pa.float64()), ("day", pa.int32())])
FILES = 12


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    """12 Parquet files of sales, 2 row groups each, days rising from file to file."""
    folder = tmp_path_factory.mktemp("sales")
    paths = []
    for f in range(FILES):
        ids = range(f * 500, (f + 1) * 500)
        table = pa.table(
            {
                "id": list(ids),
                "grp": [f"g{i % 7}" for i in ids],
                "amount": [i * 0.5 for i in ids],
                "day": pa.array([i // 100 for i in ids], pa.int32()),
            },
            schema=SCHEMA,
        )
        paths.append(str(folder / f"sales-{f:02}.parquet"))
        pq.write_table(table, paths[-1], row_group_size=250)
    return paths


@pytest.fixture(scope="module")
def setup(files, dim_path):
    ctx = SessionContext()
    ctx.register_parquet("dim", dim_path)
    single = SessionContext()
    single.register_parquet("sales", os.path.dirname(files[0]))
    single.register_parquet("dim", dim_path)
    config = DistributedConfig(embedded_workers=2, partitions_per_task=2)
    with DistributedContext(ctx, config=config) as dctx:
        dctx.register_feed("sales", lambda: iter(files), "parquet", SCHEMA)
        yield dctx, single


def _units(df) -> int:
    return sum(sum(per_task.values()) for per_task in df.metrics.feed_units.values())


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT grp, count(*) AS n, sum(amount) AS total FROM sales GROUP BY grp ORDER BY grp",
        "SELECT count(*) AS n, sum(amount) AS s FROM sales WHERE day BETWEEN 20 AND 33",
        "SELECT s.grp, d.label, count(*) AS n FROM sales s JOIN dim d ON s.grp = concat('g', substr(d.tag, 2)) "
        "GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 20",
        "SELECT id, amount FROM sales WHERE id % 97 = 0",
        "SELECT id, sum(amount) OVER (PARTITION BY grp ORDER BY id) AS running FROM sales WHERE id % 50 = 0",
    ],
    ids=["group-by", "filter", "join", "scan", "window-over-a-shuffle"],
)
def test_same_answers_in_rounds(setup, sql):
    dctx, single = setup
    df = dctx.sql(sql)
    assert "run in rounds" in df.explain_string(), df.explain_string()
    check(dctx, single, sql)
    ran = dctx.sql(sql)
    ran.to_arrow_table()
    assert _units(ran) == FILES  # every file read once, over more rounds than partitions


@pytest.mark.parametrize(
    ("sql", "distributed"),
    [
        ("SELECT id, amount FROM sales ORDER BY amount DESC LIMIT 5", True),
        ("SELECT id, row_number() OVER (ORDER BY amount) AS r FROM sales WHERE id % 50 = 0", True),
        # these two are planned as one task, run in the coordinator
        (
            "SELECT grp, count(*) AS n FROM (SELECT grp FROM sales UNION ALL SELECT tag AS grp FROM dim) GROUP BY grp",
            False,
        ),
        ("SELECT d.tag, count(s.id) AS n FROM dim d LEFT JOIN sales s ON s.grp = d.tag GROUP BY 1", False),
    ],
    ids=["top-k", "window", "union-with-a-table", "outer-join-padding-the-feed"],
)
def test_plans_that_cannot_run_in_rounds_read_their_units_at_once(setup, sql, distributed):
    dctx, single = setup
    assert "run in rounds" not in dctx.sql(sql).explain_string()
    check(dctx, single, sql, distributed=distributed)


def test_counts_are_never_answered_before_the_units_are_read(setup):
    dctx, single = setup  # DataFusion answers count(*), min and max from files' statistics
    check(dctx, single, "SELECT count(*) AS n, min(id) AS lo, max(day) AS hi FROM sales")


def test_the_oracle_reads_the_files(files):
    from datafusion_distributed import WorkUnitFeed

    feed = WorkUnitFeed("sales", files[:3], "parquet", SCHEMA)
    assert read_units(feed).num_rows == 1500


def test_empty_feed(setup, files):
    dctx, _ = setup
    dctx.register_feed("nothing", lambda: iter([]), "parquet", SCHEMA)
    assert dctx.sql("SELECT count(*) AS n, sum(amount) AS s FROM nothing").to_pylist() == [
        {"n": 0, "s": None}
    ]
    assert dctx.sql("SELECT grp FROM nothing GROUP BY grp").to_pylist() == []


@pytest.mark.parametrize(
    "unit, detail",
    [
        ("relative/path.parquet", "absolute path"),
        ("/no/such/file.parquet", "No such file"),
        (42, "TypeError"),
    ],
)
def test_a_bad_unit_fails_naming_it(setup, files, unit, detail):
    dctx, _ = setup
    dctx.register_feed("broken", lambda: iter([files[0], unit]), "parquet", SCHEMA)
    with pytest.raises(FeedFailed) as failed:
        dctx.sql("SELECT count(*) FROM broken").collect()
    assert failed.value.feed == "broken" and str(unit) in str(failed.value.unit), str(failed.value)
    assert detail in str(failed.value)


def test_bad_registrations(setup):
    dctx, _ = setup
    with pytest.raises(ValueError, match='"parquet"'):
        dctx.register_feed("x", [], "csv", SCHEMA)


def test_a_file_without_a_column_reads_it_as_nulls(setup, tmp_path):
    dctx, _ = setup
    older = str(tmp_path / "older.parquet")  # written before `day` was added
    pq.write_table(pa.table({"id": [1, 2], "grp": ["a", "b"], "amount": [0.5, 1.5]}), older)
    from datafusion_distributed import WorkUnitFeed

    dctx.register_feed("mixed", lambda: iter([older]), "parquet", SCHEMA)
    sql = "SELECT id, day FROM mixed ORDER BY id"
    assert dctx.sql(sql).to_pylist() == [{"id": 1, "day": None}, {"id": 2, "day": None}]
    assert read_units(WorkUnitFeed("mixed", [older], "parquet", SCHEMA)).column("day").null_count == 2


def test_one_worker_reads_the_feed_in_the_coordinator(files):
    single = SessionContext()
    single.register_parquet("sales", os.path.dirname(files[0]))
    config = DistributedConfig(embedded_workers=1)
    with DistributedContext(SessionContext(), config=config) as dctx:
        dctx.register_feed("sales", lambda: iter(files), "parquet", SCHEMA)
        check(
            dctx,
            single,
            "SELECT grp, count(*) AS n, max(amount) AS top FROM sales GROUP BY grp",
            distributed=False,
        )


def test_the_files_are_pruned_with_the_filter_above_the_scan(setup):
    dctx, single = setup
    sql = "SELECT count(*) AS n, sum(amount) AS s FROM sales WHERE day BETWEEN 20 AND 23"
    check(dctx, single, sql)
    text = dctx.sql(sql).explain_string(analyze=True)
    scan = next(line for line in text.splitlines() if "DataSourceExec" in line)
    # days 20 to 23 are rows 2000 to 2399: the two row groups of one file, 500 of 6000 rows
    assert re.search(r"output_rows=500\b", scan), scan


def test_a_bad_unit_in_a_later_round_fails_the_query_and_stops_the_provider(setup, files):
    dctx, _ = setup
    stopped = threading.Event()

    def listing():
        try:
            yield from files[:9]  # rounds of 2 units per task: the 10th unit is in a later round
            yield "/no/such/file.parquet"
            yield from files[9:]
        finally:
            stopped.set()

    dctx.register_feed("late", listing, "parquet", SCHEMA)
    with pytest.raises(FeedFailed, match="No such file"):
        dctx.sql("SELECT grp, count(*) FROM late GROUP BY grp").collect()
    assert stopped.wait(10)


def test_cancelling_a_query_running_in_rounds(setup, files):
    dctx, _ = setup
    given, stopped = threading.Event(), threading.Event()

    def endless():  # a listing that never ends: the rounds go on until the query is cancelled
        try:
            for n in itertools.count():
                if n == 6:
                    given.set()
                yield files[n % FILES]
                time.sleep(0.01)
        finally:
            stopped.set()

    dctx.register_feed("endless", endless, "parquet", SCHEMA)
    df = dctx.sql("SELECT grp, count(*) FROM endless GROUP BY grp")
    assert "run in rounds" in df.explain_string()
    errors = cancel_once(df, given)
    assert len(errors) == 1 and isinstance(errors[0], QueryCancelled), errors
    assert stopped.wait(10)


@pytest.fixture(scope="module")
def tpch_feeds():
    """TPC-H SF 0.01 with `orders`, `supplier` and `nation` read as feeds of their Parquet files."""
    data = tpch_data(0.01)
    single, ctx = SessionContext(), SessionContext()
    register_tpch(single, data)
    register_tpch(ctx, data)
    with DistributedContext(
        ctx, config=DistributedConfig(embedded_workers=2, partitions_per_task=2, bytes_per_partition=1)
    ) as dctx:
        for table in ("orders", "supplier", "nation"):
            paths = sorted(str(p) for p in (data / table).glob("*.parquet"))
            dctx.deregister_table(table)
            dctx.register_feed(table, lambda paths=paths: iter(paths), "parquet", pq.read_schema(paths[0]))
        yield dctx, single


@pytest.mark.parametrize("query", [3, 5, 9, 13, 18, 21, 22])
def test_tpch_with_tables_read_as_parquet_feeds(tpch_feeds, query):
    dctx, single = tpch_feeds
    check(dctx, single, tpch_query(query))
