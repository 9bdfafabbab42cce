"""A live progress line for running queries, drawn with rich: stages done of total, tasks
running and done, rows and bytes exchanged so far.

It is an ordinary event handler: events only update counters, and rich redraws from them a
few times a second on its own thread, so a query never waits for the display. On a console
that is not a terminal (a pipe, a log file) it draws nothing; in a notebook rich shows it as
a cell output.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..events.handlers import DistributedHandler, Event, EventKind
from .explain import format_bytes, format_seconds

REFRESHES_PER_SECOND = 4


class QueryProgress:
    """Counters of one query, updated from events."""

    def __init__(self, stages: int):
        self.started = time.perf_counter()
        self.stages = stages
        self.stages_done = 0
        self.tasks_running = 0
        self.tasks_done = 0
        self.rows = 0
        self.bytes = 0
        self.failed = 0
        self.finished = False

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
        elif kind is EventKind.TASK_FAILED:
            self.tasks_running = max(0, self.tasks_running - 1)
            self.failed += 1
        elif kind is EventKind.STAGE_FINISHED:
            self.stages_done += 1
        elif kind in (EventKind.QUERY_FINISHED, EventKind.QUERY_FAILED):
            self.finished = True

    def text(self) -> str:
        """The progress line as it stands now."""
        elapsed = format_seconds(time.perf_counter() - self.started)
        failed = f", {self.failed} failed" if self.failed else ""
        return (
            f"stages {self.stages_done}/{self.stages} · tasks {self.tasks_running} running, "
            f"{self.tasks_done} done{failed} · {self.rows:,} rows · {format_bytes(self.bytes)} shuffled · {elapsed}"
        )


class ProgressDisplay(DistributedHandler):
    """Shows each query's progress while it runs (see the module docstring).

    Args:
        console: a rich Console (default: a new one on standard error).
    """

    def __init__(self, console: Any = None):
        self.console = console
        self._live: Any = None
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
        from rich.live import Live

        with self._lock:
            self._query_id = query_id
            self._progress = progress
            self._live = Live(
                _Renderable(progress),
                console=self._console(),
                refresh_per_second=REFRESHES_PER_SECOND,
                transient=False,
            )
            self._live.start()

    def _stop(self) -> None:
        with self._lock:
            live, self._live = self._live, None
            self._progress = None
        if live is not None:
            live.refresh()
            live.stop()


class _Renderable:
    """Drawn by rich on each refresh, from the counters as they are then."""

    def __init__(self, progress: QueryProgress):
        self.progress = progress

    def __rich__(self):
        from rich.text import Text

        return Text(self.progress.text())
