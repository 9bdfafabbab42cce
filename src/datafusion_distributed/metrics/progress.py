"""A live progress line for running queries: stages done of total (and how many were re-planned
from their inputs' sizes), tasks running and done, rows and bytes exchanged so far, and at the
end how the query ended.

It is an ordinary event handler: events only update counters, and a drawing thread redraws
from them a few times a second, so a query never waits for the display. On a terminal rich
draws it; in a Jupyter notebook it is a cell output updated in place (an IPython display, so
it needs no widgets and stays in the saved notebook); anywhere else (a pipe, a log file) it
draws nothing. When the query ends the line stays, saying "finished", "failed", "cancelled"
or "timed out".
"""

from __future__ import annotations

import html
import sys
import threading
import time
from typing import Any

from ..common.units import format_bytes
from ..errors import QueryCancelled, QueryTimedOut
from ..events.handlers import DistributedHandler, Event, EventKind
from .explain import format_seconds

REFRESHES_PER_SECOND = 4
NOTEBOOK_STYLE = "font-family: monospace; font-size: 0.85em; color: #555; margin: 2px 0;"


def running_in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel), where
    progress is shown by default, as `tqdm.auto` does; a terminal IPython is not one."""
    ipython = sys.modules.get("IPython")  # never imported here: a kernel has imported it
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


def outcome_of(error: BaseException | None) -> str:
    """How a query that ended with `error` (None: it succeeded) is described on its last line."""
    if error is None:
        return "finished"
    if isinstance(error, QueryTimedOut):
        return "timed out"
    if isinstance(error, (QueryCancelled, KeyboardInterrupt)):
        return "cancelled"
    return "failed"


class QueryProgress:
    """Counters of one query, updated from events."""

    def __init__(self, stages: int) -> None:
        self.started = time.perf_counter()
        self.planned = stages
        self.folded = 0  # planned stages that run inside another (adaptive execution)
        self.stages_done = 0
        self.adapted = 0  # stages re-planned from their inputs' sizes
        self.tasks_running = 0
        self.tasks_done = 0
        self.rows = 0
        self.bytes = 0
        self.units = 0  # work units of feeds read by finished tasks
        self.failed = 0
        self.finished = False
        self.outcome = ""  # once finished: "finished", "failed", "cancelled" or "timed out"
        self.seconds = 0.0  # once finished: how long the query ran

    def update(self, event: Event) -> None:
        """Count what `event` reports."""
        kind = event.kind
        if kind is EventKind.TASK_STARTED:
            self.tasks_running += 1
        elif kind is EventKind.TASK_FINISHED:
            self.tasks_running = max(0, self.tasks_running - 1)
            self.tasks_done += 1
            report = event.metrics
            if report is not None:
                self.rows += report.rows
                self.bytes += report.bytes
                self.units += report.feed_units
        elif kind is EventKind.TASK_FAILED:
            self.tasks_running = max(0, self.tasks_running - 1)
            self.failed += 1
        elif kind is EventKind.STAGE_FINISHED:
            self.stages_done += 1
        elif kind is EventKind.STAGE_ADAPTED:
            self.adapted += 1
            if event.metrics is not None and event.metrics.folded_into is not None:
                self.folded += 1  # it runs inside another stage: it never finishes on its own
        elif kind in (EventKind.QUERY_FINISHED, EventKind.QUERY_FAILED):
            self.seconds = time.perf_counter() - self.started
            self.outcome = outcome_of(event.error if kind is EventKind.QUERY_FAILED else None)
            self.finished = True

    @property
    def stages(self) -> int:
        """Stages that run on their own: those planned, but for those folded into another."""
        return self.planned - self.folded

    def text(self) -> str:
        """The progress line as it stands now; once the query ended, its last line."""
        failed = f", {self.failed} failed" if self.failed else ""
        if self.finished:
            tasks = f"{self.tasks_done} task{'' if self.tasks_done == 1 else 's'} done{failed}"
            elapsed = format_seconds(self.seconds)
        else:
            tasks = f"tasks {self.tasks_running} running, {self.tasks_done} done{failed}"
            elapsed = format_seconds(time.perf_counter() - self.started)
        units = f"{self.units:,} feed units · " if self.units else ""
        notes = (
            [f"{self.planned} planned", f"{self.folded} folded"] if self.folded else []
        )  # from what it shrank
        notes += [f"{self.adapted} re-planned"] if self.adapted else []
        stages = f"{self.stages_done}/{self.stages}" + (f" ({', '.join(notes)})" if notes else "")
        line = (
            f"stages {stages} · {tasks} · {units}{self.rows:,} rows · "
            f"{format_bytes(self.bytes)} shuffled · {elapsed}"
        )
        return f"{line} · {self.outcome}" if self.finished else line


class ProgressDisplay(DistributedHandler):
    """Shows each query's progress while it runs (see the module docstring).

    Args:
        console: a rich Console (default: a new one on standard error); a console in a
            notebook (`is_jupyter`) draws the line as a notebook output instead.
    """

    def __init__(self, console: Any = None) -> None:
        self.console = console
        self._line: _TerminalLine | _NotebookLine | None = None
        self._progress: QueryProgress | None = None
        self._query_id: str | None = None
        self._lock = threading.Lock()

    def _console(self):
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True)
        return self.console

    @property
    def enabled(self) -> bool:
        """Whether the console can show a live line (a terminal or a notebook)."""
        console = self._console()
        return bool(console.is_terminal or console.is_jupyter)

    def on_event(self, event: Event) -> None:
        """Start the display at a query's start, update it on each event, stop it at the query's end."""
        if event.kind is EventKind.QUERY_STARTED:
            if self._progress is None:  # one query at a time: others run undisplayed
                self._start(event.query_id, QueryProgress(event.tasks or 0))
            return
        progress = self._progress
        if progress is None or event.query_id != self._query_id:
            return
        progress.update(event)
        if progress.finished:
            self._stop()

    def _start(self, query_id: str, progress: QueryProgress) -> None:
        if not self.enabled:
            return
        console = self._console()
        line = _NotebookLine(progress) if console.is_jupyter else _TerminalLine(progress, console)
        with self._lock:
            self._query_id = query_id
            self._progress = progress
            self._line = line
        line.start()

    def _stop(self) -> None:
        with self._lock:
            line, self._line = self._line, None
            self._progress = None
        if line is not None:
            line.stop()


class _TerminalLine:
    """The line on a terminal: a rich Live, redrawn by rich's own thread; its last drawing stays."""

    def __init__(self, progress: QueryProgress, console: Any) -> None:
        from rich.live import Live

        self.live = Live(
            _Renderable(progress), console=console, refresh_per_second=REFRESHES_PER_SECOND, transient=False
        )

    def start(self) -> None:
        self.live.start()

    def stop(self) -> None:
        self.live.refresh()
        self.live.stop()


class _NotebookLine:
    """The line in a notebook: a display output that a thread updates in place.

    rich's own notebook support needs ipywidgets and a notebook with the widget extension,
    and leaves nothing in a saved notebook; an IPython display with an id needs neither. The
    thread also ends by itself once the query has ended, so an interrupted `stop` cannot
    leave it running."""

    def __init__(self, progress: QueryProgress) -> None:
        self.progress = progress
        self._stopped = threading.Event()
        self._handle: Any = None
        self._thread = threading.Thread(target=self._redraw, name="query-progress", daemon=True)

    def _bundle(self) -> dict[str, str]:
        text = self.progress.text()
        return {"text/plain": text, "text/html": f'<div style="{NOTEBOOK_STYLE}">{html.escape(text)}</div>'}

    def start(self) -> None:
        from IPython.display import display

        self._handle = display(self._bundle(), raw=True, display_id=True)
        self._thread.start()

    def _redraw(self) -> None:
        while not self._stopped.wait(1 / REFRESHES_PER_SECOND) and not self.progress.finished:
            self._handle.update(self._bundle(), raw=True)
        self._handle.update(self._bundle(), raw=True)  # the last line: how the query ended

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)  # bounded: a stuck notebook connection must not hang the query


class _Renderable:
    """Drawn by rich on each refresh, from the counters as they are then."""

    def __init__(self, progress: QueryProgress) -> None:
        self.progress = progress

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.progress.text())
