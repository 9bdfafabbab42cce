"""Coordinators and draining workers: a worker that drains gets no new task (one it refuses
runs elsewhere at once, as the same attempt), the outputs it holds are read as usual, and
nothing is recomputed; workers the resolver lists as a stage starts take its tasks.

The workers run in this process, each with a spool of its own, so every exchange crosses
Arrow Flight (the outputs of a draining worker are fetched from it)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, FlightWorker
from datafusion_distributed.coordinator.membership import Membership
from datafusion_distributed.events import EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import FORCED_CONFIG
from datafusion_distributed.test_utils.recorder import EventRecorder
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query

TOKEN = "drain-test-token"
CONFIG = dataclasses.replace(FORCED_CONFIG, auth_token=TOKEN, worker_refresh_seconds=0.0)
QUERY = 5  # six joins: several stages reading each other's outputs


class Workers:
    """A resolver whose list the test changes."""

    def __init__(self, urls: list[str]):
        self.urls = list(urls)
        self.asked = 0

    def get_urls(self) -> list[str]:
        self.asked += 1
        return list(self.urls)


@pytest.fixture
def workers(tmp_path):
    started = [FlightWorker(str(tmp_path / f"spool-{i}"), auth_token=TOKEN) for i in range(4)]
    yield started
    for w in started:
        w.stop()


def run(tpch, resolver, handlers, config=CONFIG):
    ctx = SessionContext()
    register_tpch(ctx, tpch)
    with DistributedContext(ctx, workers=resolver, config=config, handlers=handlers) as dctx:
        df = dctx.sql(tpch_query(QUERY))
        return df.to_arrow_table(), df


def ran_on(recorder: EventRecorder) -> list[str]:
    return [e.worker for e in recorder.events if e.kind is EventKind.TASK_FINISHED]


def check(got, df, single_node):
    sql = tpch_query(QUERY)
    assert_tables_equal(got, single_node.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)


def test_a_draining_worker_is_routed_around_at_once_and_nothing_is_rerun(
    workers, tpch_sf001, single_node_sf001
):
    drained = workers[0]
    drained.drain()
    recorder = EventRecorder()
    started = time.monotonic()
    got, df = run(tpch_sf001, Workers([w.url for w in workers[:3]]), [recorder])
    check(got, df, single_node_sf001)
    assert time.monotonic() - started < CONFIG.liveness_timeout  # no timeout waited for
    assert drained.url not in ran_on(recorder)
    (event,) = [e for e in recorder.events if e.kind is EventKind.WORKER_DRAINING]
    assert event.worker == drained.url
    assert recorder.lost() == []
    assert not [e for e in recorder.events if e.kind is EventKind.TASK_FAILED]
    metrics = df.metrics
    assert metrics.draining_workers == [drained.url]
    assert metrics.rerun_tasks == 0 and metrics.lost_workers == []


class DrainAfterFirstStage:
    """Drains the worker that ran the first finished stage's first task, as the stages reading
    its outputs start: they fetch them from a draining worker."""

    def __init__(self, workers: list[FlightWorker]):
        self.by_url = {w.url: w for w in workers}
        self.drained: FlightWorker | None = None
        self.held_then = False
        self.served_then = 0

    def on_event(self, event):
        if event.kind is EventKind.STAGE_FINISHED and self.drained is None and event.metrics.tasks:
            worker = self.by_url.get(event.metrics.tasks[0].worker)
            if worker is not None:
                self.drained = worker
                worker.drain()
                self.held_then = not worker.wait_drained(0)
                health = worker.health()
                self.served_then = health["served_file_bytes"] + health["served_stream_bytes"]


def test_the_outputs_of_a_draining_worker_are_fetched_from_it_and_nothing_is_recomputed(
    workers, tpch_sf001, single_node_sf001
):
    drainer, recorder = DrainAfterFirstStage(workers[:3]), EventRecorder()
    got, df = run(tpch_sf001, Workers([w.url for w in workers[:3]]), [drainer, recorder])
    check(got, df, single_node_sf001)
    drained = drainer.drained
    assert drained is not None and drainer.held_then  # it held outputs the query had not read
    health = drained.health()
    assert health["served_file_bytes"] + health["served_stream_bytes"] > drainer.served_then
    assert recorder.lost() == [] and df.metrics.rerun_tasks == 0
    assert drained.wait_drained(10)  # the query released its outputs: it may leave


def test_workers_listed_as_a_stage_starts_take_its_tasks(workers, tpch_sf001, single_node_sf001):
    resolver = Workers([w.url for w in workers[:2]])
    joined = [w.url for w in workers[2:]]

    class ScaleUp:
        def __init__(self):
            self.at = None

        def on_event(self, event):
            if event.kind is EventKind.STAGE_FINISHED and self.at is None:
                resolver.urls += joined
                self.at = len(recorder.events)

    recorder, scale = EventRecorder(), ScaleUp()
    got, df = run(tpch_sf001, resolver, [recorder, scale])
    check(got, df, single_node_sf001)
    before = [e.worker for e in recorder.events[: scale.at] if e.kind is EventKind.TASK_STARTED]
    after = [e.worker for e in recorder.events[scale.at :] if e.kind is EventKind.TASK_STARTED]
    assert not set(before) & set(joined)
    assert set(after) & set(joined), after


def test_a_stage_whose_resolver_fails_runs_on_the_workers_it_had(workers, tpch_sf001, single_node_sf001):
    class Failing(Workers):
        def get_urls(self):
            if self.asked >= 2:  # the query's start asks twice (plan, run): stages fail
                self.asked += 1
                raise OSError("resolver down")
            return super().get_urls()

    resolver = Failing([w.url for w in workers[:2]])
    got, df = run(tpch_sf001, resolver, [])
    check(got, df, single_node_sf001)
    assert resolver.asked > 2


def test_membership_reuses_an_answer_for_its_age_then_asks_again():
    now = [0.0]
    resolver = Workers(["grpc://a:1"])
    membership = Membership(resolver, clock=lambda: now[0])
    assert membership.current() == ["grpc://a:1"] and resolver.asked == 1
    resolver.urls = ["grpc://a:1", "grpc://b:1"]
    now[0] = 0.5
    assert membership.recent(1.0) == ["grpc://a:1"] and resolver.asked == 1
    now[0] = 1.6
    assert membership.recent(1.0) == ["grpc://a:1", "grpc://b:1"] and resolver.asked == 2
    assert membership.current() and resolver.asked == 3  # a query's start always asks
    assert membership.recent(0.0) and resolver.asked == 4

    def down():
        resolver.asked += 1
        raise OSError("resolver down")

    resolver.get_urls = down
    now[0] = 3.0
    with pytest.raises(OSError):
        membership.recent(1.0)
    now[0] = 3.5  # a failure is not asked again sooner than an answer would be
    assert membership.recent(1.0) == ["grpc://a:1", "grpc://b:1"] and resolver.asked == 5
