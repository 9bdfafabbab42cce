"""The workers a coordinator knows to be draining: they refused a task, or answered a liveness
probe saying so. No query sends them a task while they are marked; the outputs they hold are
read as usual (a draining worker serves them until its queries release them).

A mark is dropped when a probe of the worker answers that it serves (a new worker listening at
the same address) or gets no answer (it has left: a task sent there later fails as for any
lost worker)."""

from __future__ import annotations

import threading


class DrainingWorkers:
    """A thread-safe set of worker URLs, shared by every query of a coordinator."""

    def __init__(self) -> None:
        self._urls: set[str] = set()
        self._lock = threading.Lock()

    def mark(self, url: str) -> None:
        """Note that `url` drains: it gets no new task."""
        with self._lock:
            self._urls.add(url)

    def clear(self, url: str) -> None:
        """Note that `url` no longer drains (it serves again, or it has gone)."""
        with self._lock:
            self._urls.discard(url)

    def __contains__(self, url: object) -> bool:
        with self._lock:
            return url in self._urls

    def marked(self) -> set[str]:
        """The workers marked now."""
        with self._lock:
            return set(self._urls)
