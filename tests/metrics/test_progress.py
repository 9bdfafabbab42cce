"""The live progress display: quiet off a terminal, drawn on one, driven by events."""

from __future__ import annotations

import io

from datafusion import SessionContext
from rich.console import Console

from datafusion_distributed import DistributedContext
from datafusion_distributed.events import Event, EventKind
from datafusion_distributed.metrics.progress import ProgressDisplay, QueryProgress

QUERY = "SELECT x % 3 AS k, count(*) AS n FROM t GROUP BY 1 ORDER BY 1"


def _context(handlers=()):
    ctx = SessionContext()
    ctx.from_pydict({"x": list(range(1000))}, name="t")
    return DistributedContext(ctx, handlers=handlers)


def test_quiet_when_not_a_terminal():
    out = io.StringIO()
    display = ProgressDisplay(Console(file=out, force_terminal=False, force_jupyter=False))
    with _context([display]) as dctx:
        assert len(dctx.sql(QUERY).to_pylist()) == 3
    assert out.getvalue() == ""


def test_draws_on_a_terminal():
    out = io.StringIO()
    display = ProgressDisplay(Console(file=out, force_terminal=True, width=120))
    with _context([display]) as dctx:
        assert len(dctx.sql(QUERY).to_pylist()) == 3
        stages = len(dctx.sql(QUERY).distributed_plan().stages)
    text = out.getvalue()
    assert "stages " in text and "tasks " in text and "shuffled" in text
    # the last drawing shows the finished query
    assert f"stages {stages}/{stages}" in text


def test_progress_flag_per_call_and_per_context(monkeypatch):
    shown = []
    monkeypatch.setattr(ProgressDisplay, "on_event", lambda self, event: shown.append(event.kind))
    with _context() as dctx:
        dctx.sql(QUERY).to_pylist()
        assert shown == []
        dctx.sql(QUERY).to_arrow_table(progress=True)
        assert shown[0] is EventKind.QUERY_STARTED and shown[-1] is EventKind.QUERY_FINISHED
    shown.clear()
    with _context() as dctx:
        dctx.progress = True
        dctx.sql(QUERY).collect()
        assert shown
        shown.clear()
        dctx.sql(QUERY).collect(progress=False)
        assert shown == []


def test_counters():
    progress = QueryProgress(stages=2)
    progress.update(Event(EventKind.TASK_STARTED, "q", stage=0, task=0))
    progress.update(Event(EventKind.TASK_STARTED, "q", stage=0, task=1))
    assert progress.tasks_running == 2
    progress.update(Event(EventKind.TASK_FINISHED, "q", stage=0, task=0))
    progress.update(Event(EventKind.STAGE_FINISHED, "q", stage=0))
    assert (progress.tasks_running, progress.tasks_done, progress.stages_done) == (1, 1, 1)
    assert progress.text().startswith("stages 1/2 · tasks 1 running, 1 done")
