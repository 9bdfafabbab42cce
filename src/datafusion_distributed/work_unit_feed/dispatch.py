"""Handing a query's feed units to the tasks that ask for them, each unit once per scan.

The coordinator keeps, per query, the units each feed's provider has given so far (the
provider is pulled only when a task asks for a unit no one has yet: units are discovered as
the query runs), and per feed scan a queue of what is left. A task attempt asks with a token
of its own; what it took is recorded against it:

- the attempt succeeds (`commit`): its units are the task's, for good. If its outputs are
  lost later with their worker, the rerun of the task is handed exactly those units again.
- the attempt fails or is given up (`abandon`): its units go back to the front of the queue,
  for the other tasks or the task's next attempt; its output is never read, and whatever
  the abandoned attempt asks for afterwards is refused.

So every unit is read once per scan in every successful query. A scan a stage reads whole
(a side a join must see entire) hands each task attempt every unit, in order.
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import cloudpickle

from ..execution_plans.stage import FeedScan
from .errors import FeedError, short_repr
from .feed import UnitIterator, WorkUnitFeed


class AttemptAbandoned(RuntimeError):
    """A task attempt asked for units after the coordinator gave up on it."""


@dataclass(frozen=True)
class Unit:
    """A unit as a task is handed it: its number in the provider's order and its pickled value."""

    index: int
    payload: bytes


class UnitLog:
    """The units one feed's provider gave in one query, pulled as tasks need more."""

    def __init__(self, feed: WorkUnitFeed) -> None:
        self.feed = feed
        self.units: list[bytes] = []
        self.names: list[str] = []  # each unit's repr, to name it in errors
        self.exhausted = False
        self.failure: FeedError | None = None
        self._iterator: UnitIterator | None = None
        self._lock = threading.Lock()
        self._closed = False

    def get(self, index: int) -> bytes | None:
        """Unit `index`, pulling the provider up to it; None once the provider has ended
        before it. Raises FeedError when the provider fails (and from then on)."""
        with self._lock:
            while index >= len(self.units):
                if self.failure is not None:
                    raise self.failure
                if self.exhausted or self._closed:
                    return None
                self._pull()
            return self.units[index]

    def _pull(self) -> None:
        after = f"after unit {self.names[-1]}" if self.names else None
        try:
            if self._iterator is None:
                self._iterator = self.feed.open_units()  # started when the query first needs it
            more, unit = self._iterator.next()
            if not more:
                self.exhausted = True
                return
            payload = cloudpickle.dumps(unit)
        except FeedError as exc:
            self.failure = exc
            raise
        except Exception as exc:
            self.failure = FeedError(self.feed.name, "provider", after, f"{type(exc).__name__}: {exc}")
            raise self.failure from exc
        self.units.append(payload)
        self.names.append(short_repr(unit))

    def close(self) -> None:
        """Stop the provider (also while it is producing a unit)."""
        self._closed = True
        iterator = self._iterator
        if iterator is not None:
            iterator.close()
        with self._lock:  # the provider may have been started meanwhile
            if self._iterator is not None:
                self._iterator.close()


@dataclass
class _ScanQueue:
    scan: FeedScan
    log: UnitLog
    next: int = 0  # the next unit of the log no task had yet
    returned: collections.deque = field(default_factory=collections.deque)  # units of abandoned attempts


@dataclass
class _Attempt:
    stage: int
    task: int
    replay: dict[int, list[int]] | None  # the units of a committed task, handed out again
    taken: dict[int, list[int]] = field(default_factory=lambda: collections.defaultdict(list))
    cursors: dict[int, int] = field(default_factory=lambda: collections.defaultdict(int))
    abandoned: bool = False


class FeedRun:
    """The units of one query's feed scans, handed to task attempts as they ask (see the
    module's docstring). Thread-safe."""

    def __init__(self, query_id: str, feeds: Mapping[str, WorkUnitFeed], scans: Sequence[FeedScan]) -> None:
        self.query_id = query_id
        self.feeds = dict(feeds)
        logs = {feed_id: UnitLog(feed) for feed_id, feed in self.feeds.items()}
        missing = sorted({scan.feed_id for scan in scans} - set(logs))
        if missing:
            raise FeedError(
                "?", "provider", None, f"the plan reads feed {missing[0]}, which this context does not know"
            )
        self._logs = logs
        self._scans = {scan.scan_id: _ScanQueue(scan, logs[scan.feed_id]) for scan in scans}
        self._attempts: dict[str, _Attempt] = {}
        self._current: dict[tuple[int, int], str] = {}
        self._committed: dict[tuple[int, int], dict[int, list[int]]] = {}
        self._lock = threading.Lock()
        self.reader_failure: FeedError | None = None
        self.closed = False

    @property
    def failure(self) -> FeedError | None:
        """The first error of a provider or reader of this query's feeds, if any."""
        if self.reader_failure is not None:
            return self.reader_failure
        return next((log.failure for log in self._logs.values() if log.failure is not None), None)

    def feed_of(self, scan_id: int) -> WorkUnitFeed:
        """The feed scan `scan_id` reads."""
        return self._scans[scan_id].log.feed

    def begin(self, stage: int, task: int) -> str:
        """Start an attempt of task `task` of `stage`; returns the token it asks with. A task
        whose earlier attempt was committed is handed that attempt's units again."""
        token = uuid.uuid4().hex
        with self._lock:
            self._abandon_locked(stage, task)
            committed = self._committed.get((stage, task))
            self._attempts[token] = _Attempt(stage, task, committed)
            self._current[stage, task] = token
        return token

    def take(self, token: str, scan_id: int) -> Unit | None:
        """The next unit of scan `scan_id` for the attempt `token`, or None when there is none
        left for it. Raises AttemptAbandoned for an attempt given up on, FeedError when the
        provider failed."""
        with self._lock:
            attempt = self._attempt(token)
            queue = self._scans.get(scan_id)
            if queue is None:
                raise AttemptAbandoned(f"query {self.query_id} has no feed scan {scan_id}")
            in_order = attempt.replay is not None or queue.scan.whole
            if in_order:
                index = self._next_in_order(attempt, queue)
                if index is None:
                    return None
            elif queue.returned:
                index = queue.returned.popleft()
            else:
                index = queue.next
                queue.next += 1
        # The provider is pulled without the run's lock: a slow page holds back only the
        # tasks waiting for that unit.
        payload = queue.log.get(index)
        with self._lock:
            if payload is None:
                if not in_order and queue.next == index + 1:
                    queue.next = index  # the end: whoever asks next finds it too
                return None
            if attempt.abandoned:  # given up on while the provider worked
                if not in_order:  # the unit goes back (an in-order one is nobody else's)
                    queue.returned.appendleft(index)
                raise AttemptAbandoned(
                    f"the attempt of stage {attempt.stage} task {attempt.task} was given up on"
                )
            attempt.taken[scan_id].append(index)
        return Unit(index, payload)

    @staticmethod
    def _next_in_order(attempt: _Attempt, queue: _ScanQueue) -> int | None:
        """The index of the attempt's next unit of a scan read whole, or of its committed
        units (None past the last committed one); a whole scan reads the log as it grows."""
        scan_id = queue.scan.scan_id
        position = attempt.cursors[scan_id]
        attempt.cursors[scan_id] += 1
        if attempt.replay is None:
            return position
        units = attempt.replay.get(scan_id, [])
        return units[position] if position < len(units) else None

    def _attempt(self, token: str) -> _Attempt:
        attempt = self._attempts.get(token)
        if attempt is None or attempt.abandoned or self.closed:
            raise AttemptAbandoned("this task attempt was given up on, or its query has ended")
        return attempt

    def unit_failed(self, token: str, scan_id: int, index: int, detail: str) -> None:
        """Record that reading unit `index` of scan `scan_id` failed (the first such error is the
        query's)."""
        with self._lock:
            queue = self._scans.get(scan_id)
            if queue is None or not 0 <= index < len(queue.log.names):
                return
            if self.reader_failure is None:
                self.reader_failure = FeedError(queue.log.feed.name, "reader", queue.log.names[index], detail)

    def commit(self, stage: int, task: int) -> None:
        """The current attempt of the task succeeded: its units are the task's."""
        with self._lock:
            token = self._current.pop((stage, task), None)
            attempt = self._attempts.pop(token, None) if token else None
            if attempt is not None and attempt.replay is None:
                self._committed[stage, task] = {scan: list(units) for scan, units in attempt.taken.items()}

    def abandon(self, stage: int, task: int) -> None:
        """The current attempt of the task failed or was given up on: its units go back."""
        with self._lock:
            self._abandon_locked(stage, task)

    def _abandon_locked(self, stage: int, task: int) -> None:
        token = self._current.pop((stage, task), None)
        attempt = self._attempts.pop(token, None) if token else None
        if attempt is None:
            return
        attempt.abandoned = True
        if attempt.replay is not None:
            return
        for scan_id, units in attempt.taken.items():
            queue = self._scans[scan_id]
            if not queue.scan.whole:
                queue.returned.extendleft(reversed(units))

    def units_per_task(self, stage: int) -> dict[int, int]:
        """How many units each committed task of `stage` read, over its feed scans."""
        with self._lock:
            return {
                task: sum(len(units) for units in scans.values())
                for (s, task), scans in sorted(self._committed.items())
                if s == stage
            }

    def units_done(self) -> int:
        """Units read by committed tasks so far, over every scan."""
        with self._lock:
            return sum(len(units) for scans in self._committed.values() for units in scans.values())

    def close(self) -> None:
        """End the run: stop every provider, refuse every later request."""
        with self._lock:
            self.closed = True
        for log in self._logs.values():
            log.close()
