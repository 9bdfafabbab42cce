"""The live progress display: quiet off a terminal, drawn on one or in a notebook, driven by
events, its last line saying how the query ended."""

from __future__ import annotations

import io
import re

import pytest
from datafusion import SessionContext
from rich.console import Console

from datafusion_distributed import DistributedContext, QueryCancelled, QueryFailed, QueryTimedOut
from datafusion_distributed.events import AdaptiveDecision, Event, EventKind
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
    assert "stages " in text and " done" in text and "shuffled" in text
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


def test_stages_re_planned_are_counted_and_one_run_inside_another_leaves_the_total():
    progress = QueryProgress(stages=3)
    fewer = AdaptiveDecision(stage=0, planned_tasks=2, tasks=1, input_bytes=10, input_rows=1)
    folded = AdaptiveDecision(stage=1, planned_tasks=2, tasks=0, input_bytes=10, input_rows=1, folded_into=2)
    for decision in (fewer, folded):
        progress.update(Event(EventKind.STAGE_ADAPTED, "q", stage=decision.stage, metrics=decision))
    assert progress.text().startswith("stages 0/2 (3 planned, 1 folded, 2 re-planned) · ")


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, "finished"),
        (QueryFailed("boom"), "failed"),
        (QueryCancelled("stop"), "cancelled"),
        (KeyboardInterrupt(), "cancelled"),
        (QueryTimedOut("late"), "timed out"),
    ],
)
def test_the_last_line_says_how_the_query_ended(error, outcome):
    progress = QueryProgress(stages=2)
    kind = EventKind.QUERY_FINISHED if error is None else EventKind.QUERY_FAILED
    progress.update(Event(kind, "q", error=error))
    assert progress.finished and progress.text().endswith(f" · {outcome}")
    assert "running" not in progress.text()


class _Interrupt:
    """Ctrl-C while the query runs: KeyboardInterrupt in the thread running it."""

    def on_event(self, event):
        if event.kind is EventKind.STAGE_STARTED:
            raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("handlers", "query", "raised", "outcome"),
    [
        ((), "SELECT x / (x - 500) AS r FROM t", QueryFailed, "failed"),
        ((_Interrupt(),), QUERY, KeyboardInterrupt, "cancelled"),
    ],
)
def test_a_terminal_line_ends_with_the_outcome(handlers, query, raised, outcome):
    out = io.StringIO()
    display = ProgressDisplay(Console(file=out, force_terminal=True, width=160))
    with _context([*handlers, display]) as dctx:
        with pytest.raises(raised):
            dctx.sql(query).collect()
        assert display._line is None  # stopped
    drawn = [
        line for line in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())) if line
    ]
    assert drawn[-1].endswith(f" · {outcome}")  # the last drawing stays


def test_a_notebook_line_is_one_output_updated_in_place(monkeypatch):
    import IPython.display

    shown = []

    class Handle:
        def update(self, bundle, raw):
            shown.append(bundle)

    def display(bundle, raw, display_id):
        shown.append(bundle)
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    progress = ProgressDisplay(Console(file=io.StringIO(), force_jupyter=True))
    with _context([progress]) as dctx:
        assert len(dctx.sql(QUERY).to_pylist()) == 3
    assert shown[0]["text/plain"].startswith("stages 0/")
    last = shown[-1]
    assert last["text/plain"].endswith(" · finished") and " done · " in last["text/plain"]
    assert "<div" in last["text/html"]
