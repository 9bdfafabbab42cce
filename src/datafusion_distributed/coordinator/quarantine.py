"""Workers a coordinator found lost, kept out of later queries until they answer again.

A query that loses a worker (it died, or stopped answering its liveness probes) marks it here.
Later queries of the same coordinator send it no task, so a dead worker is not retried and
logged again by every query, and a hung one does not cost each query `liveness_timeout` to be
found again. A thread of its own asks each quarantined worker for its health, first after a
second and then twice as long each time (at most `MAX_BACKOFF` seconds); the first answer ends
its quarantine. Only while other workers remain: a query whose every worker is quarantined
tries them (see `RunState.live_workers`). The context's handlers are told of both
(`worker_quarantined`, `worker_restored`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..common.threads import kept_threads
from ..events.handlers import Event, EventKind
from ..protocol.flight import ClientPool

log = logging.getLogger("datafusion_distributed.coordinator")

FIRST_BACKOFF = 1.0  # seconds before a quarantined worker is first asked again
MAX_BACKOFF = 30.0  # the longest wait between two asks
_TICK = 0.2  # how often the thread looks for a worker due


@dataclass
class _Quarantined:
    next_probe: float
    backoff: float
    probing: bool = False


class WorkerQuarantine:
    """The quarantined workers of one coordinator (every query of a DistributedContext)."""

    def __init__(self, clients: ClientPool) -> None:
        self._clients = clients
        # told of each worker quarantined and restored (a context sets its handlers' notify)
        self.notify: Callable[[Event], None] | None = None
        self._workers: dict[str, _Quarantined] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def add(self, url: str) -> None:
        """Quarantine `url` (a query found it lost); asked again from the background."""
        now = time.monotonic()
        with self._lock:
            added = url not in self._workers
            if added:
                self._workers[url] = _Quarantined(now + FIRST_BACKOFF, FIRST_BACKOFF)
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(target=self._loop, name="worker-quarantine", daemon=True)
                self._thread.start()
        if added:
            log.warning("worker %s quarantined: later queries avoid it until it answers again", url)
            self._tell(EventKind.WORKER_QUARANTINED, url)

    def marked(self) -> set[str]:
        """The workers quarantined now."""
        with self._lock:
            return set(self._workers)

    def release(self, url: str) -> None:
        """End `url`'s quarantine (it answered)."""
        with self._lock:
            released = self._workers.pop(url, None) is not None
        if released:
            log.warning("worker %s answers again: back in service", url)
            self._tell(EventKind.WORKER_RESTORED, url)

    def _tell(self, kind: EventKind, url: str) -> None:
        if self.notify is not None:
            self.notify(Event(kind, "", worker=url))  # the context's, not one query's

    def close(self) -> None:
        """Stop asking (the context closes)."""
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(_TICK):
            now = time.monotonic()
            with self._lock:
                if not self._workers:
                    self._thread = None
                    return
                due = [u for u, e in self._workers.items() if not e.probing and e.next_probe <= now]
                for url in due:
                    self._workers[url].probing = True
            for url in due:
                kept_threads.submit(self._probe, url)
        with self._lock:
            self._thread = None

    def _probe(self, url: str) -> None:
        try:
            self._clients.get(url).health()
        except Exception:  # still away: ask again later, twice as late
            with self._lock:
                entry = self._workers.get(url)
                if entry is not None:
                    entry.backoff = min(MAX_BACKOFF, entry.backoff * 2)
                    entry.next_probe = time.monotonic() + entry.backoff
                    entry.probing = False
            return
        self.release(url)
