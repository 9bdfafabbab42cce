"""Which workers a coordinator uses, asked of its resolver at a bounded cost.

Every query asks the resolver when it starts; each of its stages asks again when it starts,
unless the last answer is younger than `worker_refresh_seconds`, so workers that join mid-query
take the tasks of later stages and workers that leave the list get none. A stage whose
resolver fails (or lists nobody) goes on with the workers it had; a failure, like an answer,
is not asked again for `worker_refresh_seconds`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..protocol.resolver import WorkerResolver


class Membership:
    """A resolver's last answer and when it was given.

    Args:
        resolver: anything with `get_urls()`.
        clock: a monotonic clock in seconds (time.monotonic by default).
    """

    def __init__(self, resolver: WorkerResolver, clock: Callable[[], float] = time.monotonic) -> None:
        self.resolver = resolver
        self._clock = clock
        self._urls: list[str] = []
        self._at = -float("inf")
        self._lock = threading.Lock()  # one question at a time, however many stages start

    def current(self) -> list[str]:
        """The resolver's answer now (asked every time: a query starts)."""
        with self._lock:
            return self._ask()

    def recent(self, max_age: float) -> list[str]:
        """The last answer if it is younger than `max_age` seconds, else the resolver's answer now."""
        with self._lock:
            if self._urls and self._clock() - self._at < max_age:
                return list(self._urls)
            try:
                return self._ask()
            except Exception:
                if self._urls:  # not asked again before `max_age` either: a failing resolver may be slow
                    self._at = self._clock()
                raise

    def _ask(self) -> list[str]:
        urls = list(self.resolver.get_urls())
        if urls:
            self._urls, self._at = urls, self._clock()
        return list(urls)
