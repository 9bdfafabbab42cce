"""Stopping a task while DataFusion works, not only between batches.

A thread waiting in
DataFusion's `next()` for a batch is watched: its task's check runs every `POLL_SECONDS`, and
when it raises, the thread is sent an exception, which DataFusion sees within a second (it runs
Python code in a waiting thread once a second, to notice Ctrl-C); the wait then ends, which
drops the Rust future, and the stream is dropped, which aborts the tokio tasks DataFusion
spawned for it. (DataFusion's async iterator can be cancelled more directly, but each batch
then costs a round trip between threads: TPC-H ran 10-15% slower.) An aborted tokio task stops
only when it next yields, and a join can work for minutes without yielding (it emits rows into
its consumer within one poll), so a task runs every join of its plan under a CooperativeExec,
which makes the join's consumer yield every so many batches.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


POLL_SECONDS = 0.1  # how often the checks of tasks waiting for a batch are run
REARM_SECONDS = 1.0  # how long an interrupted wait may go on before it is interrupted again


class _Interrupt(BaseException):
    """Raised in a thread waiting for DataFusion's next batch, to abandon the wait. A
    BaseException, so that a UDF's `except Exception` running in that thread lets it through."""


def _set_async_exc(thread: int, exc: type[BaseException] | None) -> None:
    """Have `thread` raise `exc` at its next Python instruction (None: forget a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc) if exc else None)


class _Wait:
    """A partition being read: the watchdog may interrupt the thread reading it only while that
    thread is inside DataFusion's `next()` (`inside`). The interruption is raised again every
    REARM_SECONDS while the thread stays inside: Python code run in that thread by something
    else (a gc callback, a `__del__`) may receive it and have it ignored."""

    def __init__(self, check: Callable[[], None]) -> None:
        self.thread = 0  # the thread inside `next()`
        self.check = check
        self.lock = threading.Lock()
        self.inside = False
        self.interrupted = False
        self.interrupted_at = 0.0

    def enter(self) -> None:
        with self.lock:
            self.thread = threading.get_ident()
            self.inside = True

    def leave(self) -> None:
        with self.lock:
            self.inside = False
            if self.interrupted:  # raised already, or still pending: never outside the wait
                _set_async_exc(self.thread, None)

    def poll(self) -> None:
        """Run the check; if it raises while the thread waits, interrupt the wait."""
        if not self.interrupted:
            try:
                self.check()
                return
            except BaseException:  # the thread runs the check itself once interrupted
                pass
        with self.lock:
            now = time.monotonic()
            if self.inside and (not self.interrupted or now - self.interrupted_at >= REARM_SECONDS):
                self.interrupted, self.interrupted_at = True, now
                _set_async_exc(self.thread, _Interrupt)


class _Watchdog:
    """One thread that polls every wait for a batch every POLL_SECONDS while there is one."""

    def __init__(self) -> None:
        self._waits: set[_Wait] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._idle = False  # waiting for a first wait (otherwise it finds new ones as it polls)

    def watch(self, check: Callable[[], None]) -> _Wait:
        waiting = _Wait(check)
        with self._changed:
            self._waits.add(waiting)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="batch-wait-watchdog", daemon=True)
                self._thread.start()
            if self._idle:
                self._changed.notify()
        return waiting

    def forget(self, waiting: _Wait) -> None:
        with self._changed:
            self._waits.discard(waiting)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waits:
                    self._idle = True
                    self._changed.wait()
                    self._idle = False
                waits = list(self._waits)
            for waiting in waits:
                try:
                    waiting.poll()
                except Exception as exc:  # never let the watchdog die: the wait runs on
                    log.warning("could not interrupt a wait for a batch: %s", exc)
            time.sleep(POLL_SECONDS)


watchdog = _Watchdog()
INTERRUPTED = object()


def next_batch(held: list, waiting: _Wait | None) -> Any:
    """The next batch of the stream `held[0]`, None at its end, or INTERRUPTED when the
    watchdog interrupted the wait (the interruption is dropped here: its frames hold the
    stream)."""
    if waiting is None:
        return next(held[0], None)
    try:
        try:
            waiting.enter()
            return next(held[0], None)
        finally:
            waiting.leave()
    except BaseException:
        if not waiting.interrupted:
            raise
    waiting.leave()  # it may have interrupted the first `leave`
    return INTERRUPTED
