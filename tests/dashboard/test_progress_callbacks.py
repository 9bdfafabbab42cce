"""`DistributedContext.on_progress`: callbacks called while a query runs, a few times a second,
once more when it ends, from a thread of their own that the query never waits for."""

from __future__ import annotations

import threading
import time

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.dashboard.progress import CALLS_PER_SECOND
from datafusion_distributed.events import DistributedHandler
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query

WAIT = 30.0


class Paced(DistributedHandler):
    """Holds each task back before it is routed, so a small query runs long enough to watch."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def route_task(self, request):
        time.sleep(self.seconds)
        return None


@pytest.fixture
def ctx(tpch_sf001):
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    return ctx


def _last_call(calls: list, query_id: str):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        done = [p for p in calls if p.query_id == query_id and p.done]
        if done:
            return done
        time.sleep(0.05)
    raise AssertionError("no last progress call within the wait")


def test_progress_is_reported_while_the_query_runs_and_once_at_its_end(ctx):
    config = DistributedConfig(
        bytes_per_partition=1024, adaptive=False, exchange="spool"
    )  # stages one by one
    with DistributedContext(ctx, config=config, handlers=[Paced(0.25)]) as dctx:
        calls = []
        callback = calls.append
        assert dctx.on_progress(callback) is callback
        df = dctx.sql(tpch_query(3))
        started = time.monotonic()
        df.to_arrow_table()
        seconds = time.monotonic() - started
        query_id = df.metrics.query_id
        (last,) = _last_call(calls, query_id)

    mine = [p for p in calls if p.query_id == query_id]
    running = [p for p in mine if not p.done]
    assert running, "no call while the query ran"
    assert any(0 < p.stages_done < p.stages_total for p in running)
    assert any(p.tasks_done > 0 and p.bytes > 0 for p in running)  # counted as tasks end
    assert all(a.seconds <= b.seconds for a, b in zip(mine, mine[1:], strict=False))  # in order
    assert len(mine) <= seconds * CALLS_PER_SECOND + 3  # a few times a second at most
    assert (last.state, last.stages_done, last.tasks_running) == ("finished", last.stages_total, 0)
    assert last.tasks_done == sum(len(s.tasks) for s in df.metrics.stages.values())
    assert last.bytes == sum(t.bytes for s in df.metrics.stages.values() for t in s.tasks) > 0


def test_a_blocked_callback_never_holds_up_a_query_and_one_that_raises_is_skipped(ctx):
    release = threading.Event()
    entered = threading.Event()
    calls = []

    def blocked(progress) -> None:
        entered.set()
        release.wait(WAIT)

    def raising(progress) -> None:
        raise RuntimeError("a broken callback")

    with DistributedContext(ctx, config=DistributedConfig(bytes_per_partition=1024)) as dctx:
        dctx.on_progress(blocked)
        dctx.on_progress(raising)
        dctx.on_progress(calls.append)
        try:
            dctx.sql("SELECT 1").to_arrow_table()
            assert entered.wait(WAIT)  # the callbacks' thread now waits inside `blocked`
            df = dctx.sql(tpch_query(1))
            df.to_arrow_table()  # runs to its end all the same
            assert not release.is_set()
        finally:
            release.set()
        _last_call(calls, df.metrics.query_id)  # the others go on being called
        assert dctx.remove_progress(blocked) and not dctx.remove_progress(blocked)


def test_removed_callbacks_are_called_no_more(ctx):
    with DistributedContext(ctx) as dctx:
        calls = []
        dctx.on_progress(calls.append)
        dctx.remove_progress(calls.append)
        dctx.sql("SELECT 1").to_arrow_table()
        time.sleep(0.6)
        assert calls == []
        with pytest.raises(TypeError, match="callable"):
            dctx.on_progress("not a function")
