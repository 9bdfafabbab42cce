"""Stopping a running query: `DistributedDataFrame.cancel()` from another thread, Ctrl-C, or a
per-query timeout (`DistributedConfig.query_timeout`).

The thread running a query asks its `CancelScope` at least every `POLL_SECONDS` while it waits
for tasks, and before every result batch; while it waits for the final stage's next batch from
DataFusion, its wait is interrupted within a second (see `runtime.interruption`). Once
cancelled (or past the deadline) it raises `QueryCancelled` (`QueryTimedOut`), and the
coordinator tells every worker to cancel the query: running tasks abort their work within a
second and the query's spool data is deleted.
"""

from __future__ import annotations

import threading
import time

from ..errors import QueryCancelled, QueryTimedOut

POLL_SECONDS = 0.1


class CancelScope:
    """Whether a query should stop: cancelled by a caller, or past its deadline."""

    def __init__(self, timeout: float | None = None) -> None:
        self._event = threading.Event()
        self._timeout = timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def start(self, timeout: float | None) -> None:
        """(Re)start the clock: the query may run `timeout` seconds from now (None: no limit)."""
        self._timeout = timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def cancel(self) -> None:
        """Ask the query to stop: its thread raises QueryCancelled at its next `check`."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether the query should stop: cancelled, or past its deadline."""
        return self._event.is_set() or self.timed_out

    @property
    def timed_out(self) -> bool:
        """Whether the query has run past its deadline (`DistributedConfig.query_timeout`)."""
        return self._deadline is not None and time.monotonic() > self._deadline

    def check(self) -> None:
        """Raise QueryCancelled (or QueryTimedOut) if the query should stop."""
        if self._event.is_set():
            raise QueryCancelled("the query was cancelled")
        if self.timed_out:
            raise QueryTimedOut(
                f"the query ran longer than its timeout of {self._timeout:g}s (query_timeout)"
            )
