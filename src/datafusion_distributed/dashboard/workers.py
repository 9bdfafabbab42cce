"""The workers' state for the dashboard and `distributed.workers`: each worker's health answer
(its load: running tasks, spool bytes, memory, bytes served), what the coordinator's liveness
probes and queries found (lost, not answering), and the tasks the coordinator has running there.

Workers are asked in threads of their own, at most one call per worker at a time, each waited
for `wait_seconds` at most: a frozen worker shows as not answering, and never holds up a page.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from ..common.threads import kept_threads
from ..coordinator.liveness import LivenessMonitor
from ..protocol.flight import ClientPool
from .history import RUNNING, QueryHistory

WAIT_SECONDS = 2.0  # for a health answer before a worker shows as not answering
FRESH_SECONDS = 1.0  # a health answer younger than this is not asked for again


@dataclass(frozen=True)
class WorkerState:
    """One worker as the dashboard shows it.

    `health` is "ok", "draining" or "drained" (it answers, and takes no new task: see
    `worker.drain`), "not answering" (no answer within the wait; "checking" before that),
    "unreachable" or "error" (the call failed: `error` says how), "lost" (a query's liveness
    probes gave up on it), or "quarantined" (a query lost it, and later queries avoid it until
    it answers again: see `coordinator.quarantine`);
    `running_tasks` counts the task attempts the coordinator has running there; the rest comes
    from the worker's `health` answer (None when it did not answer); `in_process` says the
    worker runs in this process (the embedded cluster), so its memory is the whole process's."""

    url: str
    health: str
    running_tasks: int
    worker_running_tasks: int | None = None
    spool_bytes: int | None = None
    spool_files: int | None = None
    memory_bytes: int | None = None
    in_process: bool = False  # an embedded worker: its memory is this process's, shared
    served_bytes: int | None = None
    version: str | None = None
    lost_at: float | None = None
    checked_at: float | None = None
    error: str = ""


class WorkerStatus:
    """Asks the workers for their health and puts it together with what the coordinator knows.

    Args:
        urls: the workers now (the context's resolver).
        clients: the connections to them.
        liveness: the coordinator's probes.
        history: the queries (task attempts running on each worker, workers found lost).
        wait_seconds: how long a health answer is waited for.
    """

    def __init__(
        self,
        urls: Callable[[], Sequence[str]],
        clients: ClientPool,
        liveness: LivenessMonitor,
        history: QueryHistory,
        wait_seconds: float = WAIT_SECONDS,
    ) -> None:
        self._urls = urls
        self._clients = clients
        self._liveness = liveness
        self._history = history
        self.wait_seconds = wait_seconds
        self._calls: dict[str, tuple[float, Future]] = {}  # url -> (asked at, its health call)
        self._answers: dict[str, tuple[float, dict | BaseException]] = {}
        self._lock = threading.Lock()

    def states(self, wait: bool = True) -> list[WorkerState]:
        """Every worker's state: health asked again where the last answer is older than a
        second; with `wait`, answers are waited for (up to `wait_seconds`), else the last ones
        are shown."""
        try:
            urls = list(self._urls())
        except Exception as exc:  # a resolver that fails shows as no workers, with why
            return [WorkerState("(resolver)", "error", 0, error=str(exc))]
        now = time.monotonic()
        pending = [self._ask(url, now) for url in urls]
        if wait:
            deadline = now + self.wait_seconds
            for call in pending:
                if call is not None:
                    try:
                        call.result(timeout=max(0.0, deadline - time.monotonic()))
                    except Exception:  # a timeout or the call's own error: shown below
                        pass
        running = self._history.read(_running_per_worker)
        lost = self._history.lost_workers()
        quarantined = self._liveness.quarantine.marked()
        states = [self._state(url, running.get(url, 0), lost.get(url), wait) for url in urls]
        return [
            dataclasses.replace(state, health="quarantined")
            if state.url in quarantined and state.health != "ok"
            else state
            for state in states
        ]

    def _ask(self, url: str, now: float) -> Future | None:
        with self._lock:
            answered = self._answers.get(url)
            if answered is not None and now - answered[0] < FRESH_SECONDS:
                return None
            call = self._calls.get(url)
            if call is not None and not call[1].done():
                return call[1]  # one call at a time: a frozen worker gets no pile of them
            future = kept_threads.submit(self._health, url)
            self._calls[url] = (now, future)
            return future

    def _health(self, url: str) -> None:
        try:
            answer: dict | BaseException = self._clients.get(url).health()
        except Exception as exc:
            answer = exc
        with self._lock:
            self._answers[url] = (time.monotonic(), answer)

    def _state(self, url: str, running: int, lost_at: float | None, waited: bool) -> WorkerState:
        """`url`'s state from its last answer; a call still out after it was waited for (or for
        longer than `wait_seconds`) makes it "not answering"."""
        with self._lock:
            answered = self._answers.get(url)
            call = self._calls.get(url)
        checked = time.time() - (time.monotonic() - answered[0]) if answered else None
        if self._liveness.lost(url):
            return WorkerState(url, "lost", running, lost_at=lost_at, checked_at=checked)
        pending = call is not None and not call[1].done()
        waiting = call is not None and pending and (waited or time.monotonic() - call[0] > self.wait_seconds)
        if waiting or answered is None:  # asked long ago with no answer yet, or asked just now
            health = "not answering" if waiting else "checking"
            return WorkerState(url, health, running, lost_at=lost_at, checked_at=checked)
        answer = answered[1]
        if isinstance(answer, BaseException):
            kind = type(answer).__name__
            health = {"WorkerUnreachable": "unreachable", "WorkerTimeout": "not answering"}.get(kind, "error")
            return WorkerState(url, health, running, lost_at=lost_at, checked_at=checked, error=str(answer))
        drain_state = answer.get("state")
        return WorkerState(
            url,
            drain_state if drain_state in ("draining", "drained") else "ok",
            running,
            worker_running_tasks=_int(answer.get("running_tasks")),
            spool_bytes=_int(answer.get("spool_bytes")),
            spool_files=_int(answer.get("spool_files")),
            memory_bytes=_int(answer.get("memory_bytes")),
            in_process=answer.get("pid") == os.getpid(),
            served_bytes=(_int(answer.get("served_file_bytes")) or 0)
            + (_int(answer.get("served_stream_bytes")) or 0),
            version=str(answer.get("version", "")) or None,
            lost_at=lost_at,
            checked_at=checked,
        )


def _int(value: object) -> int | None:
    """A count from a worker's answer (None when absent: an older worker)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _running_per_worker(records: list) -> dict[str, int]:
    counts: dict[str, int] = {}
    for query in records:
        if query.state != RUNNING:
            continue
        for attempt in query.attempts.values():
            if attempt.state == RUNNING:
                counts[attempt.worker] = counts.get(attempt.worker, 0) + 1
    return counts
