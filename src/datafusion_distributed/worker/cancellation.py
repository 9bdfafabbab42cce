"""Queries a worker was told to cancel: their running tasks stop within a second (they are asked
while they wait for each batch, see `runtime.interruption`), and tasks of theirs that
arrive later are refused. One task attempt may be cancelled alone the same way (another attempt
of its task won, see `coordinator.speculation`). Entries are forgotten after the spool TTL (by then any coordinator
still sending tasks for the query has given up). A worker that stops cancels every query."""

from __future__ import annotations

import threading
import time

from ..protocol.messages import TaskKey
from ..runtime.streaming import TaskCancelled


class Cancellations:
    """The queries (and single task attempts) a worker was told to cancel, each remembered for
    `ttl_seconds` (at most `max_entries`)."""

    def __init__(self, ttl_seconds: float = 3600.0, max_entries: int = 100_000) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._at: dict[str | TaskKey, float] = {}  # a query id, or one attempt
        self._lock = threading.Lock()
        self._all = threading.Event()

    def cancel(self, query_id: str | TaskKey) -> None:
        """Mark a query (or one task attempt) cancelled, forgetting the oldest entries when
        there are too many."""
        now = time.monotonic()
        with self._lock:
            self._at[query_id] = now
            if len(self._at) > self.max_entries or len(self._at) % 1024 == 0:
                self._forget_older_than(now - self.ttl_seconds)
            while len(self._at) > self.max_entries:  # oldest first
                del self._at[next(iter(self._at))]

    def _forget_older_than(self, cutoff: float) -> None:
        for query_id in [q for q, at in self._at.items() if at < cutoff]:
            del self._at[query_id]

    def cancel_all(self) -> None:
        """Cancel every query, running or to come (the worker is stopping)."""
        self._all.set()

    def is_cancelled(self, query_id: str | TaskKey) -> bool:
        """Whether the query was cancelled within the last `ttl_seconds`, or every query was;
        for a task attempt, also whether that attempt alone was."""
        if self._all.is_set() or (isinstance(query_id, TaskKey) and self.is_cancelled(query_id.query_id)):
            return True
        with self._lock:
            at = self._at.get(query_id)
        return at is not None and time.monotonic() - at <= self.ttl_seconds

    def check(self, query_id: str | TaskKey) -> None:
        """Raise TaskCancelled if the query (or the task attempt) was cancelled: before a task
        starts and before each input it fetches."""
        if self.is_cancelled(query_id):
            what = f"query {query_id}" if isinstance(query_id, str) else f"task attempt {query_id.attempt}"
            raise TaskCancelled(f"{what} was cancelled")
