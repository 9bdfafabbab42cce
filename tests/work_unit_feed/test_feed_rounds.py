"""FeedRounds on its own: rounds made once each, in order, ended by a round with no unit, and a
partition two rounds ahead of another waits for it."""

from __future__ import annotations

import pickle
import threading
import time

import pyarrow as pa
import pytest

from datafusion_distributed.runtime.inputs import arrow_scan
from datafusion_distributed.work_unit_feed.dispatch import Unit
from datafusion_distributed.work_unit_feed.feed import FeedReader
from datafusion_distributed.work_unit_feed.reading import FeedRounds, FeedToRead


class Files:
    """A unit source of `count` units naming this test file (a file that exists)."""

    def __init__(self, count: int):
        self.left = list(range(count))
        self.lock = threading.Lock()

    def next_unit(self) -> Unit | None:
        with self.lock:
            return Unit(self.left.pop(0), pickle.dumps(__file__)) if self.left else None

    def unit_failed(self, index: int, detail: str) -> None:
        pass


class Plan:
    partition_count = 2

    def __init__(self, leaf: bytes):
        self.leaf = leaf


def rounds_over(units: int) -> tuple[FeedRounds, list[Plan]]:
    made: list[Plan] = []
    schema = pa.schema([("a", pa.int64())])
    feed = FeedToRead(b"m", arrow_scan(schema, []), 0, FeedReader("f", "parquet", schema), 2, Files(units))

    def build(marker: bytes, leaf: bytes) -> Plan:
        made.append(Plan(leaf))
        return made[-1]

    return FeedRounds(feed, lambda: None, build), made


def test_rounds_are_made_once_in_order_until_one_has_no_unit():
    rounds, made = rounds_over(3)  # 2 units a round: rounds 0 and 1, then none
    first = rounds.plan(0)
    assert rounds.plan(0) is first and len(made) == 1
    rounds.finished(0, 2)
    rounds.finished(0, 2)
    assert rounds.plan(1) is made[1]
    assert rounds.plan(2) is None and len(made) == 2


def test_an_empty_feed_still_runs_round_zero():
    rounds, made = rounds_over(0)
    assert rounds.plan(0) is made[0]
    rounds.finished(0, 2)
    rounds.finished(0, 2)
    assert rounds.plan(1) is None


def test_a_partition_two_rounds_ahead_waits_for_the_others():
    rounds, _ = rounds_over(10)
    rounds.plan(0)
    rounds.finished(0, 2)  # partition 0 is done with round 0, partition 1 is not
    rounds.plan(1)
    rounds.finished(1, 2)
    got = []
    ahead = threading.Thread(target=lambda: got.append(rounds.plan(2)))
    ahead.start()
    time.sleep(0.3)
    assert ahead.is_alive() and not got  # waits for partition 1 to finish round 0
    rounds.finished(0, 2)
    ahead.join(5)
    assert not ahead.is_alive() and got and got[0] is not None


def test_a_waiting_partition_stops_when_told_to():
    rounds, _ = rounds_over(10)
    rounds.plan(0)
    rounds.finished(0, 2)
    rounds.plan(1)
    stop = threading.Event()

    def check() -> None:
        if stop.is_set():
            raise RuntimeError("another partition failed")

    errors = []

    def run() -> None:
        try:
            rounds.plan(2, check)
        except RuntimeError as exc:
            errors.append(exc)

    waiting = threading.Thread(target=run)
    waiting.start()
    time.sleep(0.2)
    stop.set()
    waiting.join(5)
    assert not waiting.is_alive() and errors


def test_a_round_that_failed_fails_every_partition_asking():
    rounds, _ = rounds_over(10)

    def broken(marker: bytes, leaf: bytes) -> Plan:
        raise ValueError("no plan")

    rounds.build = broken
    for _ in range(2):
        with pytest.raises(ValueError, match="no plan"):
            rounds.plan(0)
