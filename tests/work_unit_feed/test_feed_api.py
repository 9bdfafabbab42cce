"""A feed through the public API: errors of its provider and reader, cancellation, the kinds
of provider it takes, when it starts, and what explain() and progress say of it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pyarrow as pa
import pytest
from datafusion import SessionContext
from feed_helpers import CONFIG, EVENTS, cancel_once, check, oracle, read_event_unit, register_events

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    FeedFailed,
    QueryCancelled,
    QueryFailed,
    WorkUnitFeed,
    read_units,
)
from datafusion_distributed.coordinator.feed_tasks import feed_would_leak_token
from datafusion_distributed.test_utils.forced import forced_distribution
from datafusion_distributed.work_unit_feed.dispatch import FeedRun
from datafusion_distributed.work_unit_feed.service import FeedService


@pytest.fixture(scope="module")
def dctx():
    with DistributedContext(SessionContext(), config=CONFIG) as context:
        yield context


def test_a_provider_error_fails_the_query_naming_the_feed(dctx):
    def pages():
        yield from range(5)
        raise ConnectionError("the listing API answered 503")

    dctx.register_feed("broken_listing", pages, read_event_unit, EVENTS)
    with pytest.raises(FeedFailed) as failed:
        dctx.sql("SELECT count(*) FROM broken_listing").collect()
    error = failed.value
    assert (error.feed, error.source, error.unit) == ("broken_listing", "provider", "after unit 4")
    assert "ConnectionError: the listing API answered 503" in str(error)
    assert isinstance(error, QueryFailed)


def test_a_reader_error_fails_the_query_naming_the_unit(dctx):
    def read(unit: int) -> pa.Table:
        if unit == 7:
            raise ValueError("corrupt page")
        return read_event_unit(unit)

    dctx.register_feed("corrupt", list(range(20)), read, EVENTS)
    with pytest.raises(FeedFailed) as failed:
        dctx.sql("SELECT sum(v) FROM corrupt").collect()
    error = failed.value
    assert (error.feed, error.source, error.unit) == ("corrupt", "reader", "7")
    assert str(error) == "feed 'corrupt': reading unit 7 failed: ValueError: corrupt page"


def test_a_reader_returning_the_wrong_columns_is_a_reader_error(dctx):
    dctx.register_feed("wrong", [1], lambda u: pa.table({"other": [u]}), EVENTS)
    with pytest.raises(
        FeedFailed, match="reading unit 1 failed: ValueError: the reader's batch has no column 'unit'"
    ):
        dctx.sql("SELECT * FROM wrong").collect()


def test_cancelling_stops_the_provider(dctx):
    given, stopped = threading.Event(), threading.Event()

    def endless():
        try:
            n = 0
            while True:
                if n == 3:
                    given.set()
                yield n
                n += 1
                time.sleep(0.02)
        finally:
            stopped.set()

    dctx.register_feed("endless", endless, read_event_unit, EVENTS)
    df = dctx.sql("SELECT count(*) FROM endless")
    errors = cancel_once(df, given)
    assert len(errors) == 1 and isinstance(errors[0], QueryCancelled)
    assert stopped.wait(10)


def test_a_query_timeout_stops_the_provider():
    stopped = threading.Event()

    def endless():
        try:
            while True:
                time.sleep(0.02)
                yield 1
        finally:
            stopped.set()

    config = DistributedConfig(embedded_workers=2, query_timeout=1.0)
    with DistributedContext(SessionContext(), config=config) as context:
        context.register_feed("endless", endless, read_event_unit, EVENTS)
        with pytest.raises(QueryCancelled):
            context.sql("SELECT count(*) FROM endless").collect()
    assert stopped.wait(10)


def test_the_provider_starts_when_the_query_runs_not_when_it_is_planned(dctx):
    calls = []

    def provider():
        calls.append(1)
        yield from range(3)

    feed = dctx.register_feed("lazy", provider, read_event_unit, EVENTS)
    df = dctx.sql("SELECT count(*) AS n FROM lazy")
    text = df.explain_string()
    assert "[work-unit feed lazy: units handed to the tasks as they ask]" in text
    assert calls == []
    assert df.to_pylist() == [{"n": read_units(feed).num_rows}]
    assert len(calls) == 2  # the query's run, then read_units
    df.collect()
    assert len(calls) == 3  # each query starts it anew


def test_a_generator_object_is_read_by_one_query_only(dctx):
    dctx.register_feed("once", (n for n in range(4)), read_event_unit, EVENTS)
    assert dctx.sql("SELECT count(DISTINCT unit) AS n FROM once").to_pylist() == [{"n": 4}]
    with pytest.raises(FeedFailed, match="its generator was read by an earlier query"):
        dctx.sql("SELECT count(*) FROM once").collect()


def test_an_async_provider(dctx):
    async def pages():
        for n in range(12):
            await asyncio.sleep(0.001)
            yield n

    feed = dctx.register_feed("async_pages", pages, read_event_unit, EVENTS)
    check(dctx, oracle([feed]), "SELECT unit, sum(v) AS s FROM async_pages GROUP BY unit")


def test_explain_analyze_shows_units_per_task(dctx):
    register_events(dctx, "counted", 30)
    df = dctx.sql("SELECT tag, count(*) FROM counted GROUP BY tag")
    text = df.explain_string(analyze=True)
    assert "feed units per task: [" in text and "(30 in all)" in text, text
    verbose = df.explain_string(analyze=True, verbose=True)
    assert "feed_units=" in verbose


def test_progress_counts_units_done():
    from datafusion_distributed.events.handlers import Event, EventKind
    from datafusion_distributed.metrics.progress import QueryProgress
    from datafusion_distributed.metrics.query_metrics import TaskReport

    progress = QueryProgress(2)
    report = TaskReport(0, 0, 0, "w", 10, 100, ((10, 100),), None, feed_units=7)
    progress.update(Event(EventKind.TASK_FINISHED, "q", 0, 0, 0, "w", metrics=report))
    assert "7 feed units" in progress.text()


def test_one_worker_reads_the_feed_in_the_coordinator():
    """A plan of one task runs in the coordinator: from its bytes, reading the feed there,
    never from DataFusion's in-memory plan (which would read the table's empty files)."""
    config = DistributedConfig(embedded_workers=1, partitions_per_task=2)
    with DistributedContext(SessionContext(), config=config) as context:
        feed = register_events(context, "events", 9)
        plan = context.sql("SELECT * FROM events").distributed_plan()
        assert not plan.is_distributed and not plan.in_memory
        check(context, oracle([feed]), "SELECT tag, sum(k) AS s FROM events GROUP BY tag", distributed=False)


def test_a_plan_kept_on_one_node_fails_clearly(dctx):
    """Planned on one node from DataFusion's own plan, a feed would read no row: refused."""
    register_events(dctx, "kept", 5)
    sql = "SELECT k, first_value(v) IGNORE NULLS OVER (ORDER BY k) AS f FROM kept"
    with pytest.raises(QueryFailed, match="reads a work-unit feed table but must run on one node"):
        dctx.sql(sql).collect()


def test_bad_registrations_are_refused(dctx):
    with pytest.raises(TypeError, match="schema must be a pyarrow.Schema"):
        dctx.register_feed("x", [1], read_event_unit, {"a": "int"})
    with pytest.raises(ValueError, match="unique names"):
        dctx.register_feed("x", [1], read_event_unit, pa.schema([("a", pa.int64()), ("a", pa.int64())]))
    with pytest.raises(TypeError, match="provider must be an iterable"):
        dctx.register_feed("x", 5, read_event_unit, EVENTS)
    with pytest.raises(ValueError, match="tasks must be"):
        WorkUnitFeed("x", [1], read_event_unit, EVENTS, tasks=0)


def test_registering_again_replaces_the_table(dctx):
    dctx.register_feed("again", [1, 2], read_event_unit, EVENTS)
    dctx.register_feed("again", [3], read_event_unit, EVENTS)
    assert dctx.sql("SELECT DISTINCT unit FROM again").to_pylist() == [{"unit": 3}]


def test_a_feed_of_another_context_is_refused():
    with DistributedContext(SessionContext(), config=CONFIG) as first:
        register_events(first, "events", 3)
        with DistributedContext(first.ctx, config=CONFIG) as second:
            with pytest.raises(
                QueryFailed, match="the feed table 'events' registered by another DistributedContext"
            ):
                second.sql("SELECT count(*) FROM events").collect()


def test_workers_reached_over_tls_never_ask_a_plain_feed_service_off_loopback():
    # refused before any task is sent: the workers would send the cluster's token in the clear
    forced = forced_distribution(feed_host="192.0.2.10", auth_token="t" * 32, check_workers="off")
    with DistributedContext(
        SessionContext(), workers=["grpc+tls://127.0.0.1:9", "grpc+tls://127.0.0.1:10"], **forced
    ) as tls:
        register_events(tls, units=4)
        with pytest.raises(QueryFailed, match="feed service serves plain gRPC on 192.0.2.10"):
            tls.sql("SELECT count(*) FROM events").collect()


@pytest.mark.parametrize(
    ("host", "workers", "leaks"),
    [
        ("192.0.2.10", ["grpc+tls://w:1"], True),
        ("coordinator.example", ["grpc://w:1", "grpc+tls://v:1"], True),
        ("127.0.0.1", ["grpc+tls://w:1"], False),
        ("localhost", ["grpc+tls://w:1"], False),
        ("::1", ["grpc+tls://w:1"], False),
        ("192.0.2.10", ["grpc://w:1"], False),
    ],
)
def test_which_feed_hosts_tls_workers_may_ask(host, workers, leaks):
    assert feed_would_leak_token(host, workers) is leaks


def test_writing_into_a_feed_table_is_refused(dctx):
    register_events(dctx, "written", 3)
    with pytest.raises(QueryFailed, match="cannot be written to"):
        dctx.sql("INSERT INTO written VALUES (1, 2, 0.5, 't')").collect()
    assert dctx.sql("SELECT count(*) AS n FROM written").to_pylist() == [{"n": 12}]  # 3 + 4 + 5 rows


def test_a_feed_service_the_workers_cannot_reach_fails_within_connect_timeout(monkeypatch):
    silent = socket.socket()  # on loopback, accepting connections but never answering
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    unreachable = f"grpc://127.0.0.1:{silent.getsockname()[1]}"

    def start(self, query_id, scans, serve):  # never serves: the workers are sent `unreachable`
        return FeedRun(query_id, {scan.feed_id: self.feed(scan.feed_id) for scan in scans}, scans)

    monkeypatch.setattr(FeedService, "url", property(lambda self: unreachable))
    monkeypatch.setattr(FeedService, "start", start)
    config = DistributedConfig(embedded_workers=2, connect_timeout=1, task_timeout=120)
    try:
        with DistributedContext(SessionContext(), config=config) as dctx:
            register_events(dctx, units=4)
            started = time.perf_counter()
            with pytest.raises(QueryFailed, match="did not answer within 1 s"):
                dctx.sql("SELECT count(*) FROM events").collect()
            assert time.perf_counter() - started < 30
    finally:
        silent.close()
