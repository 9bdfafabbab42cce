"""The one retry policy of a query: only the loss of a worker is retried, a bounded number of
times; every other failure ends the query at once.

Every piece of work the coordinator hands out (a stage's task, a recomputed output, the head
stage's input fetches) fails through here, so every lost worker is marked dead and reported
(`worker_unreachable`) the same way, wherever its loss was found.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..errors import QueryFailed
from ..protocol.flight import lost_worker
from .lifecycle import QueryCollector

log = logging.getLogger("datafusion_distributed.coordinator")


class RetryPolicy:
    """Decides whether failed work is retried, and records the workers lost on the way.

    Args:
        attempts: tries of one piece of work whose worker was lost.
        events: where lost workers are reported.
        on_lost: told of each worker the first time it is found lost (the liveness monitor
            stops probing it for this query).
    """

    def __init__(
        self, attempts: int, events: QueryCollector, on_lost: Callable[[str], None] | None = None
    ) -> None:
        self.attempts = attempts
        self.events = events
        self.on_lost = on_lost
        self.dead: set[str] = set()

    def after_failure(self, exc: BaseException, attempt: int, what: str) -> None:
        """Let try `attempt + 1` of `what` go ahead after `exc` ended try `attempt`, or raise.

        A lost worker is marked dead (and reported the first time), and the retry waits a
        moment longer each attempt. Raises QueryFailed ("<what> failed: ...") when `exc` is not
        a lost worker or the tries are spent."""
        lost = lost_worker(exc)
        if lost is None or attempt >= self.attempts:
            tried = f" after {attempt} attempts" if lost else ""
            raise QueryFailed(f"{what} failed{tried}: {exc}") from exc
        self.mark_dead(lost, exc)
        log.warning("worker %s lost; trying again (attempt %d)", lost, attempt + 1)
        time.sleep(0.05 * attempt)

    def mark_dead(self, worker: str, exc: BaseException) -> None:
        """Record that `worker` was lost (`exc` says how): it is sent nothing more in this
        query, and is reported the first time."""
        if worker not in self.dead:
            self.dead.add(worker)
            self.events.worker_unreachable(worker, exc)
            if self.on_lost is not None:
                self.on_lost(worker)
