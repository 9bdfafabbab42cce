"""A one-time check that the given workers answer and accept the token.

A query of one task runs in the coordinator and calls no worker, so a wrong token or a dead
worker URL would go unnoticed until the first query large enough to be distributed. The first
query that stays on the coordinator therefore asks each worker for its health, in background
threads (the query does not wait), each call bounded by `connect_timeout`; each failure is
logged once, as a warning naming the worker, the cause and what to do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from ..errors import WorkerError, WorkerTimeout, WorkerUnreachable
from ..protocol.flight import ClientPool

log = logging.getLogger(__name__)

UNAUTHENTICATED = "unauthenticated"  # how a worker's refusal of the token starts
WORKER_ERRORS = (WorkerError, WorkerTimeout, WorkerUnreachable)  # their text names the worker


def advice(exc: Exception) -> str:
    """What a user should do about a failed health call that raised `exc`."""
    if isinstance(exc, WorkerError) and exc.detail.startswith(UNAUTHENTICATED):
        return (
            "it refused the token: set DistributedConfig.auth_token (or DATAFUSION_DISTRIBUTED_TOKEN) "
            "to the workers' token"
        )
    if isinstance(exc, WorkerTimeout):
        return "it did not answer: check that it is not frozen or overloaded, and that no firewall drops the calls"
    if isinstance(exc, WorkerUnreachable):
        return "it is unreachable: check that it runs and that its URL is right"
    return "check its setup (TLS, version)"


class WorkerCheck:
    """Checks the workers once, the first time `start` is called; `stop` silences a check
    still under way (its context is closing)."""

    def __init__(self, clients: ClientPool) -> None:
        self._clients = clients
        self._started = False
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    def start(self, urls: Sequence[str]) -> list[threading.Thread]:
        """Ask each of `urls` for its health in a thread of its own, the first time only;
        returns the threads started (none after the first call)."""
        with self._lock:
            if self._started:
                return []
            self._started = True
        threads = [
            threading.Thread(target=self._check, args=(url,), name=f"worker-check {url}", daemon=True)
            for url in urls
        ]
        for thread in threads:
            thread.start()
        return threads

    def stop(self) -> None:
        """Log nothing more: a call failing from now on fails because the context closed."""
        self._stopped.set()

    def _check(self, url: str) -> None:
        """Call `url`'s health, and warn when it fails (the error names the worker)."""
        try:
            self._clients.get(url).health()
        except Exception as exc:  # the check never fails a query, whatever it meets: it reports
            if not self._stopped.is_set():
                log.warning(
                    "health check failed: %s: %s (queries that run on the workers will fail or avoid it)",
                    exc if isinstance(exc, WORKER_ERRORS) else f"worker {url}: {exc}",
                    advice(exc),
                )
