"""A worker's drain: from the moment it is asked to leave (SIGTERM, the `drain` action), it
takes no new task, lets its running tasks finish, and keeps serving the outputs it holds until
the queries that need them release them; then it is drained and may exit without costing any
query a recomputed task.

The count of running tasks and the refusal of new ones share one lock, so a task is either
counted before the drain starts (and waited for) or refused: never started unseen by `wait`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

SERVING, DRAINING, DRAINED = "serving", "draining", "drained"


def draining_info(url: str) -> bytes:
    """The extra info of the error a draining worker refuses a task with: a coordinator reads
    it as "route the task elsewhere", never as a failure or a lost worker."""
    return json.dumps({"draining": url}).encode()


class TaskRefused(RuntimeError):
    """A task arrived at a worker that is draining: it is refused before it does anything."""


class Drain:
    """The drain state of one worker.

    Args:
        held_queries: the queries whose outputs the worker holds now (its spool's folders):
            the drain waits until there are none.
    """

    def __init__(self, held_queries: Callable[[], list[str]]) -> None:
        self._held_queries = held_queries
        self._running = 0
        self._changed = threading.Condition()
        self.requested = threading.Event()  # set when the drain begins: the worker's owner may act on it

    @property
    def draining(self) -> bool:
        """Whether the worker refuses new tasks (it began to drain)."""
        return self.requested.is_set()

    def start(self) -> bool:
        """Refuse new tasks from now on; whether this call began the drain (False: it had already)."""
        with self._changed:
            if self.requested.is_set():
                return False
            self.requested.set()
            self._changed.notify_all()
            return True

    def task_begins(self, name: str) -> None:
        """Count a task as running, or raise TaskRefused when the worker drains."""
        with self._changed:
            if self.requested.is_set():
                raise TaskRefused(f"{name} refused: the worker is draining (it takes no new task)")
            self._running += 1

    def task_ends(self) -> None:
        """A task counted by `task_begins` ended (finished, failed or stopped)."""
        with self._changed:
            self._running -= 1
            self._changed.notify_all()

    @property
    def running_tasks(self) -> int:
        """Tasks running now."""
        with self._changed:
            return self._running

    def report(self) -> dict[str, str | int]:
        """The drain's part of a health answer: its `state` ("serving", "draining": tasks
        running or outputs held, or "drained": it may exit), `running_tasks` and `held_queries`
        (how many queries' outputs it holds), the held outputs looked at once."""
        held = len(self._held_queries())
        running = self.running_tasks
        if not self.draining:
            state = SERVING
        else:
            state = DRAINED if running == 0 and held == 0 else DRAINING
        return {"state": state, "running_tasks": running, "held_queries": held}

    def state(self) -> str:
        """ "serving", "draining" or "drained" (see `report`)."""
        return str(self.report()["state"])

    def wait(self, timeout: float, poll: float = 0.1) -> bool:
        """Wait up to `timeout` seconds until the worker is drained; whether it is. The outputs
        held are looked at every `poll` seconds (a release moves them out of the spool)."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._changed:
                if self._running == 0 and not self._held_queries():
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(poll, left))
