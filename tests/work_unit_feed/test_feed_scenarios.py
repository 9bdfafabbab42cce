"""A feed read where any table can be: under a union, on both sides of a join, under an
aggregation, as a join's broadcast side, in nested unions; slow units, an empty feed. Every
answer is single-node DataFusion's over the same units read into a plain table."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from datafusion import SessionConfig, SessionContext
from feed_helpers import CONFIG, EVENTS, check, oracle, read_event_unit, register_events

from datafusion_distributed import DistributedContext, QueryFailed


@pytest.fixture(scope="module")
def setup(dim_path):
    ctx = SessionContext()
    ctx.register_parquet("dim", dim_path)
    with DistributedContext(ctx, config=CONFIG) as dctx:
        events = register_events(dctx, "events", 40)
        clicks = register_events(dctx, "clicks", 25, tasks=2)
        yield dctx, oracle([events, clicks], {"dim": dim_path})


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT unit, k, v, tag FROM events",
        "SELECT count(*) AS n, sum(v) AS total, min(k) AS lo, max(k) AS hi FROM events",
        "SELECT tag, count(*) AS n, sum(v) AS total FROM events GROUP BY tag ORDER BY tag",
        "SELECT unit, count(*) AS n FROM events WHERE v > 5 GROUP BY unit ORDER BY unit",
        "SELECT k, v FROM events ORDER BY v DESC, k LIMIT 7",
    ],
    ids=["scan", "aggregate", "group-by", "filter-group", "top-k"],
)
def test_under_an_aggregation_and_more(setup, sql):
    check(*setup, sql)


def test_under_a_union(setup):
    check(*setup, "SELECT k, tag FROM events UNION ALL SELECT k, tag FROM clicks")
    # one task (the parquet table is one partition), run in the coordinator: it reads the feed there
    sql = "SELECT tag, count(*) AS n FROM (SELECT tag FROM events UNION ALL SELECT tag FROM dim) GROUP BY tag"
    check(*setup, sql, distributed=False)


def test_nested_unions(setup):
    # the same feed three times: each scan reads every unit once
    check(
        *setup,
        """SELECT tag, count(*) AS n, sum(k) AS s FROM (
               SELECT tag, k FROM events
               UNION ALL (SELECT tag, k FROM clicks
                          UNION ALL (SELECT tag, k FROM events WHERE v < 10 UNION ALL SELECT tag, k FROM events))
           ) GROUP BY tag""",
    )


def test_both_sides_of_a_join(setup):
    check(*setup, "SELECT e.k, e.v, c.v AS cv FROM events e JOIN clicks c ON e.k = c.k")
    check(*setup, "SELECT a.k, b.unit FROM events a JOIN events b ON a.k = b.k + 1")  # a self-join
    check(*setup, "SELECT e.tag, count(*) AS n FROM events e LEFT JOIN clicks c ON e.k = c.k GROUP BY e.tag")


def test_joined_with_a_parquet_table(setup):
    check(*setup, "SELECT d.label, e.k FROM events e JOIN dim d ON e.tag = d.tag WHERE d.label < 'L20'")


def test_as_a_broadcast_side(dim_path):
    """With joins not repartitioned, the feed is the side a CollectLeft join collects whole:
    a stage of its own, whose output every consumer task reads."""
    config = SessionConfig().set("datafusion.optimizer.repartition_joins", "false")
    ctx = SessionContext(config)
    ctx.register_parquet("dim", dim_path)
    with DistributedContext(ctx, config=CONFIG) as dctx:
        events = register_events(dctx, "events", 30)
        single = oracle([events], {"dim": dim_path}, config)
        sql = "SELECT e.k, d.label FROM events e JOIN dim d ON e.tag = d.tag"
        text = dctx.sql(sql).explain_string()
        assert "CollectLeft" in text and "work-unit feed events" in text, text
        check(dctx, single, sql)
        # and on the probe side, with the small parquet side computed whole by each task
        check(
            dctx,
            single,
            "SELECT e.k, d.label FROM (SELECT * FROM dim WHERE label < 'L3') d JOIN events e ON e.tag = d.tag",
        )


def test_a_stage_reading_a_feed_whole():
    """A feed on the collected side of a join whose build side stays in the stage: every task
    reads every unit (the scan is read whole)."""
    # covered through the dispatch of whole scans in test_dispatch; here the answer of a plan
    # where the planner makes a feed scan whole inside a split stage, if DataFusion plans one
    config = SessionConfig().set("datafusion.optimizer.repartition_joins", "false")
    ctx = SessionContext(config)
    with DistributedContext(ctx, config=CONFIG) as dctx:
        events = register_events(dctx, "events", 12)
        clicks = register_events(dctx, "clicks", 20)
        single = oracle([events, clicks], config=config)
        check(
            dctx,
            single,
            "SELECT c.k, e.unit FROM (SELECT * FROM events WHERE unit < 3) e JOIN clicks c ON e.k = c.k",
        )


def test_slow_units(setup):
    """One unit 30 times slower than the others: the answer is the same, and the other tasks
    read the units the slow one's task did not get to."""

    def read(unit: int) -> pa.Table:
        time.sleep(0.6 if unit == 0 else 0.02)
        return read_event_unit(unit)

    dctx, _ = setup
    feed = dctx.register_feed("slow_events", events_provider_list(30), read, EVENTS, tasks=3)
    single = oracle([feed])
    got = check(dctx, single, "SELECT unit, count(*) AS n FROM slow_events GROUP BY unit")
    assert got.num_rows == 30
    df = dctx.sql("SELECT count(*) FROM slow_events")
    df.collect()
    units = df.metrics.feed_units
    assert sum(sum(per_task.values()) for per_task in units.values()) == 30


def events_provider_list(units: int) -> list[int]:
    return list(range(units))  # a list: each query iterates it anew


def test_empty_feed(setup):
    dctx, _ = setup
    feed = dctx.register_feed("nothing", [], read_event_unit, EVENTS)
    single = oracle([feed])
    got = check(dctx, single, "SELECT * FROM nothing")
    assert got.num_rows == 0 and got.schema.names == EVENTS.names
    assert check(dctx, single, "SELECT count(*) AS n FROM nothing").to_pylist() == [{"n": 0}]


def test_units_that_read_no_rows(setup):
    dctx, _ = setup
    feed = dctx.register_feed(
        "sparse",
        list(range(10)),
        lambda u: read_event_unit(u) if u % 3 == 0 else EVENTS.empty_table(),
        EVENTS,
    )
    check(dctx, oracle([feed]), "SELECT unit, sum(v) AS s FROM sparse GROUP BY unit")


def test_a_reader_that_cannot_travel(setup):
    import threading

    lock = threading.Lock()
    dctx, _ = setup
    dctx.register_feed("locked", [1], lambda u: (lock, read_event_unit(u))[1], EVENTS)
    with pytest.raises(QueryFailed, match="reader of feed 'locked' cannot be pickled"):
        dctx.sql("SELECT count(*) FROM locked").collect()


ASKED: list[tuple[str, ...]] = []  # the columns each call of the projecting reader was given


def read_columns(unit: int, columns: list[str]) -> pa.Table:
    """A reader that returns only the columns the query reads."""
    ASKED.append(tuple(columns))
    return read_event_unit(unit).select(columns)


@pytest.mark.parametrize(
    "sql, columns",
    [
        ("SELECT k, v FROM projected WHERE v > 3", {"k", "v"}),
        ("SELECT tag, count(*) AS n FROM projected GROUP BY tag", {"tag"}),
        ("SELECT count(*) AS n FROM projected", None),
        ("SELECT * FROM projected", {"unit", "k", "v", "tag"}),
        ("SELECT a.k, b.tag FROM projected a JOIN projected b ON a.k = b.k", None),
    ],
    ids=["two", "cast", "count", "all", "self-join"],
)
def test_a_reader_given_the_columns_the_query_reads(setup, sql, columns):
    dctx, _ = setup
    feed = dctx.register_feed("projected", events_provider_list(16), read_columns, EVENTS)
    single = oracle([feed])  # read_units asks for every column
    ASKED.clear()
    check(dctx, single, sql)
    asked = [set(c) for c in ASKED]
    assert asked and all(c <= set(EVENTS.names) for c in asked)
    if columns is not None:
        assert all(c == columns for c in asked), asked


def test_the_dataframe_api(setup):
    from datafusion import col, functions

    dctx, single = setup
    got = (
        dctx.table("events")
        .filter(col("v") > 4)
        .aggregate([col("tag")], [functions.count(col("k")).alias("n")])
        .sort(col("tag"))
        .to_arrow_table()
    )
    expected = single.sql("SELECT tag, count(k) AS n FROM events WHERE v > 4 GROUP BY tag ORDER BY tag")
    assert got.to_pylist() == expected.to_arrow_table().to_pylist()


def test_the_tasks_a_feed_asks_for_and_a_handler_that_decides():
    from datafusion_distributed.events.handlers import DistributedHandler, TaskCount

    class OneTaskPerFeed(DistributedHandler):
        def task_count(self, request):
            return TaskCount(desired=1) if request.feed_tasks else None

    with DistributedContext(SessionContext(), config=CONFIG) as dctx:
        register_events(dctx, "asked", 10, tasks=2)
        assert dctx.sql("SELECT k FROM asked").distributed_plan().stages[0].task_count == 2
        register_events(dctx, "default", 10)
        assert (
            dctx.sql("SELECT k FROM default").distributed_plan().stages[0].task_count == 3
        )  # one per worker
    with DistributedContext(SessionContext(), config=CONFIG, handlers=[OneTaskPerFeed()]) as dctx:
        feed = register_events(dctx, "decided", 10)
        plan = dctx.sql("SELECT k FROM decided").distributed_plan()
        assert plan.stages[0].task_count == 1 and "(by OneTaskPerFeed)" in plan.stages[0].reason
        check(dctx, oracle([feed]), "SELECT tag, count(*) AS n FROM decided GROUP BY tag", distributed=False)
