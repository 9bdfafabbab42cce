"""Checks that the given workers answer and accept the token.

A query of one task runs in the coordinator and calls no worker, so a wrong token or a dead
worker URL would go unnoticed until the first query large enough to be distributed. Workers
given as a list of URLs are therefore asked for their health before the context's first query
runs (`unanswered`, all at once, each call bounded by `connect_timeout`): a dead one fails it,
naming the worker, unless the user runs degraded (`check_workers="warn"`). Workers found by a
resolver are checked by the first query that stays on the coordinator (`WorkerCheck`), in
background threads (the query does not wait); each failure is logged once, as a warning
naming the worker, the cause and what to do.
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


def unanswered(clients: ClientPool, urls: Sequence[str]) -> dict[str, str]:
    """Each of `urls` whose health call fails, with what went wrong and what to do: all of
    them asked at once, each bounded by the clients' `connect_timeout`."""
    failures: dict[str, str] = {}

    def check(url: str) -> None:
        try:
            clients.get(url).health()
        except Exception as exc:  # whatever the call meets is reported, never raised here
            detail = str(exc)
            for named in (f"worker {url} is unreachable: ", f"worker {url}: ", f"worker {url} "):
                if detail.startswith(named):
                    detail = detail.removeprefix(named)
                    break
            failures[url] = f"{advice(exc)} ({detail})"

    threads = [threading.Thread(target=check, args=(url,), name=f"worker-check {url}") for url in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {url: failures[url] for url in urls if url in failures}


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
