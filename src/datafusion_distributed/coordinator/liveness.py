"""Liveness: a coordinator probes the workers its queries use, so that a worker that stops
answering (frozen, cut off by the network) is found in `liveness_timeout` seconds rather than
when a task's call times out.

One `LivenessMonitor` serves every query of a coordinator. While a query runs, each worker it
sent a task to gets a `heartbeat` every `interval` seconds naming the queries (of this
coordinator) it holds data of, which also renews their spool leases there, so a worker's sweep
never deletes a running query. A worker whose probes have gone unanswered for longer than the
timeout is `lost`; the scheduler then treats it exactly like a worker whose connection failed.

A probe's answer also says whether the worker drains: it is then marked in `draining` and
sent no new task. Marked workers are probed too while any query is watched, so the mark goes
when the worker serves again (a new one at the same address) or leaves.

Probes run one at a time per worker, each bounded by the timeout; the thread sending them stops
when no query is watched and starts again with the next one.
"""

from __future__ import annotations

import logging
import threading
import time

from ..common.threads import kept_threads
from ..errors import WorkerError, WorkerTimeout, WorkerUnreachable
from ..protocol.flight import ClientPool
from .draining import DrainingWorkers
from .quarantine import WorkerQuarantine

log = logging.getLogger("datafusion_distributed.coordinator")


def probe_interval(timeout: float) -> float:
    """Seconds between two probes of a worker: a quarter of the timeout, between 0.05 and 5."""
    return min(5.0, max(0.05, timeout / 4))


class LivenessMonitor:
    """Probes the workers a coordinator's queries use and says which stopped answering.

    Args:
        clients: the coordinator's connections to workers.
        timeout: seconds a worker may leave probes unanswered before it counts as lost
            (`DistributedConfig.liveness_timeout`).
    """

    def __init__(self, clients: ClientPool, timeout: float = 10.0) -> None:
        self.clients = clients
        self.timeout = timeout
        self.interval = probe_interval(timeout)
        self._queries: dict[str, set[str]] = {}  # query id -> workers holding its data
        self._unanswered: dict[str, float] = {}  # worker -> when its first unanswered probe left
        self._probing: set[str] = set()  # workers with a probe in flight
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.draining = DrainingWorkers()  # workers that said they drain: sent no new task
        self.quarantine = WorkerQuarantine(clients)  # workers lost by a query: avoided by later ones

    def set_timeout(self, timeout: float) -> None:
        """Count a worker lost after `timeout` seconds of silence from now on, probing every
        quarter of it (`DistributedConfig.liveness_timeout` changed by SET)."""
        with self._lock:
            self.timeout = timeout
            self.interval = probe_interval(timeout)

    def watch(self, query_id: str, worker: str) -> None:
        """Probe `worker` while `query_id` runs (it was sent a task of the query)."""
        with self._lock:
            if not self._watched(worker):  # watched anew: its silence counts from now on
                self._unanswered.pop(worker, None)
                if worker in self._probing:  # a probe of an earlier watch is still out
                    self._unanswered[worker] = time.monotonic()
            self._queries.setdefault(query_id, set()).add(worker)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="liveness", daemon=True)
                self._thread.start()

    def forget(self, query_id: str, worker: str | None = None) -> None:
        """Stop probing `worker` for `query_id` (lost to the query), or every worker of the
        query when `worker` is None (the query ended)."""
        with self._lock:
            workers = self._queries.get(query_id, set())
            workers.difference_update(workers if worker is None else {worker})
            if not workers:
                self._queries.pop(query_id, None)

    def lost(self, worker: str) -> bool:
        """Whether `worker` has left every probe unanswered for longer than the timeout."""
        with self._lock:
            since = self._unanswered.get(worker)
        return since is not None and time.monotonic() - since > self.timeout

    def unreachable(self, worker: str) -> WorkerUnreachable:
        """The error a task on a lost worker fails with: the same as for a worker whose
        connection failed, so it is retried, and the worker marked dead, the same way."""
        return WorkerUnreachable(worker, f"did not answer for {self.timeout:g}s (liveness_timeout)")

    def _watched(self, worker: str) -> bool:
        return any(worker in workers for workers in self._queries.values())

    def _due(self) -> dict[str, tuple[str, ...]] | None:
        """The probes to send now: each watched worker without one in flight, with the queries
        it holds; None when nothing is watched (the thread then ends)."""
        with self._lock:
            targets: dict[str, list[str]] = {}
            for query_id, workers in self._queries.items():
                for worker in workers:
                    targets.setdefault(worker, []).append(query_id)
            for worker in [w for w in self._unanswered if w not in targets and w not in self._probing]:
                del self._unanswered[worker]
            if not targets:
                self._thread = None
                return None
            for worker in self.draining.marked():  # until it serves again or leaves
                targets.setdefault(worker, [])
            now = time.monotonic()
            due = {w: tuple(sorted(ids)) for w, ids in targets.items() if w not in self._probing}
            for worker in due:
                self._probing.add(worker)
                self._unanswered.setdefault(worker, now)
            return due

    def _loop(self) -> None:
        while (due := self._due()) is not None:
            for worker, query_ids in due.items():
                kept_threads.submit(self._probe, worker, query_ids)
            time.sleep(self.interval)

    def _probe(self, worker: str, query_ids: tuple[str, ...]) -> None:
        answered = False
        try:
            if self.clients.get(worker).heartbeat(query_ids, self.timeout):
                self.draining.mark(worker)
            else:
                self.draining.clear(worker)
            answered = True
        except WorkerError:  # it answered, if only to refuse (a worker of an older version)
            answered = True
        except (WorkerTimeout, WorkerUnreachable) as exc:
            self.draining.clear(worker)  # gone: a task sent there fails as for any lost worker
            log.debug("worker %s did not answer a liveness probe: %s", worker, exc)
        except Exception:  # never let a probe's thread die silently
            log.exception("liveness probe of %s failed", worker)
        finally:
            with self._lock:
                self._probing.discard(worker)
                if answered:
                    self._unanswered.pop(worker, None)
