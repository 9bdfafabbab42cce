"""How a query's units are handed to task attempts: each once per scan, back to the queue when
an attempt is given up on, the same ones again when a finished task is rerun."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from datafusion_distributed.execution_plans.stage import FeedScan
from datafusion_distributed.work_unit_feed import FeedError, WorkUnitFeed
from datafusion_distributed.work_unit_feed.dispatch import AttemptAbandoned, FeedRun

SCHEMA = pa.schema([("n", pa.int64())])


def feed(units, name: str = "f") -> WorkUnitFeed:
    return WorkUnitFeed(name, units, lambda n: pa.table({"n": [n]}), SCHEMA)


def scan(scan_id: int, feed_id: str, whole: bool = False) -> FeedScan:
    return FeedScan(b"m", b"s", feed_id, scan_id, whole)


def drain(run: FeedRun, token: str, scan_id: int = 0) -> list[int]:
    units = []
    while (unit := run.take(token, scan_id)) is not None:
        units.append(pickle.loads(unit.payload))
    return units


def test_each_unit_goes_to_one_task():
    f = feed(range(10))
    run = FeedRun("q", {f.id: f}, [scan(0, f.id)])
    a, b = run.begin(0, 0), run.begin(0, 1)
    taken = {0: [], 1: []}
    for i in range(10):
        token, task = (a, 0) if i % 3 else (b, 1)
        taken[task].append(pickle.loads(run.take(token, 0).payload))
    assert run.take(a, 0) is None and run.take(b, 0) is None
    assert sorted(taken[0] + taken[1]) == list(range(10))
    run.commit(0, 0)
    run.commit(0, 1)
    assert run.units_per_task(0) == {0: len(taken[0]), 1: len(taken[1])}
    assert run.units_done() == 10


def test_an_abandoned_attempt_gives_its_units_back_and_is_refused():
    f = feed(range(6))
    run = FeedRun("q", {f.id: f}, [scan(0, f.id)])
    lost = run.begin(0, 0)
    first = [pickle.loads(run.take(lost, 0).payload) for _ in range(3)]
    run.abandon(0, 0)
    with pytest.raises(AttemptAbandoned):
        run.take(lost, 0)
    other = run.begin(0, 1)
    assert sorted(drain(run, other)) == list(range(6))  # the lost units, then the rest
    assert first == [0, 1, 2]


def test_a_finished_task_rerun_reads_its_own_units_again():
    f = feed(range(8))
    run = FeedRun("q", {f.id: f}, [scan(0, f.id)])
    a, b = run.begin(0, 0), run.begin(0, 1)
    mine = [pickle.loads(run.take(a, 0).payload) for _ in range(3)]
    run.commit(0, 0)
    rest = drain(run, b)
    run.commit(0, 1)
    rerun = run.begin(0, 0)  # its outputs were lost with its worker
    assert drain(run, rerun) == mine
    run.commit(0, 0)
    assert sorted(mine + rest) == list(range(8))
    assert run.units_per_task(0) == {0: 3, 1: 5}


def test_scans_of_one_feed_each_read_every_unit_and_the_provider_runs_once():
    pulled = []

    def provider():
        for n in range(5):
            pulled.append(n)
            yield n

    f = feed(provider)
    run = FeedRun("q", {f.id: f}, [scan(0, f.id), scan(1, f.id)])
    token = run.begin(0, 0)
    assert drain(run, token, 0) == list(range(5))
    assert drain(run, token, 1) == list(range(5))
    assert pulled == list(range(5))


def test_a_scan_read_whole_gives_every_attempt_every_unit():
    f = feed(range(4))
    run = FeedRun("q", {f.id: f}, [scan(0, f.id, whole=True)])
    assert drain(run, run.begin(0, 0)) == [0, 1, 2, 3]
    assert drain(run, run.begin(0, 1)) == [0, 1, 2, 3]


def test_the_provider_starts_when_a_unit_is_first_asked_for_and_stops_at_close():
    events = []

    def provider():
        events.append("started")
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            events.append("stopped")

    f = feed(provider)
    run = FeedRun("q", {f.id: f}, [scan(0, f.id)])
    token = run.begin(0, 0)
    assert events == []
    run.take(token, 0)
    assert events == ["started"]
    run.close()
    assert events == ["started", "stopped"]
    with pytest.raises(AttemptAbandoned):
        run.take(token, 0)


def test_a_provider_error_names_the_last_unit_and_stays():
    def provider():
        yield "page-1"
        raise ConnectionError("listing failed")

    f = feed(provider, "pages")
    run = FeedRun("q", {f.id: f}, [scan(0, f.id)])
    token = run.begin(0, 0)
    run.take(token, 0)
    for _ in range(2):
        with pytest.raises(
            FeedError,
            match="feed 'pages': its provider \\(after unit 'page-1'\\) failed: ConnectionError: listing failed",
        ):
            run.take(token, 0)
    assert run.failure.source == "provider"


def test_a_reader_failure_is_recorded_with_its_unit():
    f = feed(["a", "b"], "letters")
    run = FeedRun("q", {f.id: f}, [scan(0, f.id)])
    token = run.begin(0, 0)
    index = run.take(token, 0).index
    run.unit_failed(token, 0, index, "ValueError: bad")
    assert str(run.failure) == "feed 'letters': reading unit 'a' failed: ValueError: bad"
