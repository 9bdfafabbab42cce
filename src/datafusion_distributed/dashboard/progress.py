"""Progress callbacks (`DistributedContext.on_progress`): each registered function is called
with a `Progress` for every running query a few times a second, and once more when the query
ends (`done=True`).

The calls come from one thread of their own, which reads the query history; a query never
waits for a callback, and a callback that raises is logged and called again next time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .history import Progress, QueryHistory

log = logging.getLogger("datafusion_distributed.dashboard")

CALLS_PER_SECOND = 4  # at most, per query and callback

ProgressCallback = Callable[[Progress], object]


class ProgressNotifier:
    """Calls the registered callbacks with each query's progress, from its own thread (started
    with the first callback, stopped by `close` or when the last callback is removed).

    Args:
        history: where the queries' progress is read.
        interval: seconds between two rounds of calls.
    """

    def __init__(self, history: QueryHistory, interval: float = 1 / CALLS_PER_SECOND) -> None:
        self.history = history
        self.interval = interval
        self._callbacks: list[ProgressCallback] = []
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None  # the running thread's, set to end it
        self._reported: set[str] = set()  # ended queries whose last call was made

    def add(self, fn: ProgressCallback) -> None:
        """Call `fn` from now on; queries that already ended are not reported to it."""
        if not callable(fn):
            raise TypeError(f"a progress callback must be callable, got {fn!r}")
        with self._lock:
            if not self._callbacks:
                self._reported = {p.query_id for p in self.history.progress() if p.done}
            self._callbacks.append(fn)
            if self._stop is None:
                self._stop = threading.Event()
                threading.Thread(
                    target=self._loop, args=(self._stop,), name="query-progress-callbacks", daemon=True
                ).start()

    def remove(self, fn: ProgressCallback) -> bool:
        """Stop calling `fn`; returns whether it was registered."""
        with self._lock:
            if fn not in self._callbacks:
                return False
            self._callbacks.remove(fn)
            if not self._callbacks:
                self._stop_locked()
            return True

    def close(self) -> None:
        """Stop calling every callback and end the thread (within one interval)."""
        with self._lock:
            self._callbacks.clear()
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            self.tick()

    def tick(self) -> None:
        """One round: every callback is told of each running query, and of each query that
        ended since the last round (its last call)."""
        with self._lock:
            callbacks = list(self._callbacks)
        if not callbacks:
            return
        ended = set()
        for progress in self.history.progress():
            if progress.done:
                ended.add(progress.query_id)
                if progress.query_id in self._reported:
                    continue
            for fn in callbacks:
                try:
                    fn(progress)
                except Exception:  # a callback must never stop the others, nor the thread
                    log.exception("progress callback %r failed", fn)
        self._reported = ended  # forgotten once they leave the history
