"""Speculative execution: a straggler (see `stragglers`) gets a second attempt on another worker,
and the first attempt to finish wins.

The scheduler hands its running task calls to `Speculation.check` on every turn. A straggler's
call is then replaced, in the scheduler's map, by the outcome of a `_Race` between its attempt
and a new one on another live worker (chosen by the routing handlers, as a retry's is): the
outcome holds the first success, and the other attempt is stopped on its worker, its outputs
deleted (`cancel_attempt`). A failure of one attempt while the other runs is reported
(`task_failed`) but costs nothing more; the outcome fails only when both have, with a failure
that is not a lost worker when there is one (the query's own error), so the scheduler retries
or fails the task as it would have. A task gets at most one extra attempt. Never speculated:
tasks of a stage writing the query's files (a write's staging is per attempt, committed by
task), tasks reading work-unit feeds (units are handed to one attempt), work run outside the
scheduler's loop (recomputes, the head stage).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..errors import WorkerUnreachable
from ..execution_plans.stage import Stage, TaskPlan
from ..protocol.flight import draining_worker, lost_worker
from ..protocol.messages import TaskKey
from .release import stop_attempt
from .run_state import RunState
from .stragglers import StragglerRule

log = logging.getLogger("datafusion_distributed.coordinator")

Submit = Callable[[Stage, TaskPlan, str, int], Future]  # start an attempt of a task on a worker
Route = Callable[..., str]  # (stage, task, attempt, exclude=...) -> a live worker, as routed
GivenUp = Callable[[str], WorkerUnreachable | None]  # why a worker's calls are no longer waited for


@dataclass
class _Attempt:
    """One attempt of a task in a race: its call, worker and number, and how it failed."""

    future: Future
    worker: str
    number: int
    failure: BaseException | None = None
    reported: bool = False  # its failure was told to the handlers


@dataclass
class _Race:
    """Two attempts of one task; `outcome` holds the first success, or a failure once both failed."""

    stage: Stage
    index: int
    attempts: tuple[_Attempt, _Attempt]
    outcome: Future = field(default_factory=Future)


class Speculation:
    """The speculative attempts of one run (a no-op unless the run's options speculate)."""

    def __init__(
        self,
        state: RunState,
        tasks: dict[int, tuple[TaskPlan, ...]],
        submit: Submit,
        route: Route,
        given_up: GivenUp,
    ) -> None:
        self.state = state
        config = state.config
        self.rule: StragglerRule | None = (
            StragglerRule(config.speculation_factor, config.speculation_min_seconds)
            if config.speculation
            else None
        )
        self._tasks = tasks  # the scheduler's: each started stage's tasks
        self._submit, self._route, self._given_up = submit, route, given_up
        self._started: dict[Future, tuple[int, float]] = {}  # a call's stage, and when it was first seen
        self._finished: dict[int, list[float]] = {}  # stage -> seconds its finished tasks took
        self._races: dict[Future, _Race] = {}  # by outcome
        self._tried: set[tuple[int, int]] = set()  # (stage, task) given an extra attempt
        self._winners: dict[tuple[int, int], int] = {}  # the attempt that won each settled race

    def check(self, running: dict[Future, tuple[Stage, int]]) -> None:
        """One turn of the scheduler: time the calls, settle races, start attempts for stragglers."""
        if self.rule is None:
            return
        now = time.perf_counter()
        self._time(running, now)
        for race in list(self._races.values()):
            self._settle(race)
        for future, (stage, index) in list(running.items()):
            if future in self._started and self._is_straggler(stage, index, now - self._started[future][1]):
                self._speculate(running, future, stage, index)

    def racing(self, future: Future) -> bool:
        """Whether `future` is a race's outcome (its attempts' workers are watched here)."""
        return future in self._races

    def attempt_of(self, stage: int, task: int, latest: int) -> int:
        """The attempt whose result the task has: a race's winner, else `latest`."""
        return self._winners.pop((stage, task), latest)

    # -- timing -------------------------------------------------------------------------------
    def _time(self, running: dict[Future, tuple[Stage, int]], now: float) -> None:
        """Note when each new call was first seen, and how long the finished ones took."""
        for future, (stage, _) in running.items():
            if future not in self._started and future not in self._races:
                self._started[future] = (stage.id, now)
        for future, (stage_id, started) in list(self._started.items()):
            if future in running and not future.done():
                continue
            del self._started[future]  # finished, or given up on (its worker lost) and never read
            if future.done() and not future.cancelled() and future.exception() is None:
                self._finished.setdefault(stage_id, []).append(now - started)

    def _is_straggler(self, stage: Stage, index: int, elapsed: float) -> bool:
        if (stage.id, index) in self._tried or stage.feeds or self._writes_files(stage):
            return False
        if (
            stage.id in self.state.streams.pinned
        ):  # a second attempt would read nothing: streams are read once
            return False
        tasks = len(self._tasks.get(stage.id, ()))
        return self.rule is not None and self.rule.is_straggler(
            elapsed, self._finished.get(stage.id, []), tasks
        )

    def _writes_files(self, stage: Stage) -> bool:
        return self.state.plan.write is not None and stage.id == self.state.plan.final.id

    # -- racing -------------------------------------------------------------------------------
    def _speculate(
        self, running: dict[Future, tuple[Stage, int]], future: Future, stage: Stage, index: int
    ) -> None:
        """Start a second attempt of task `index` on another live worker, racing the first."""
        self._tried.add((stage.id, index))
        worker = self.state.placement[stage.id][index]
        if not self.state.live_workers(exclude=worker):
            return  # nowhere else to run it
        first = _Attempt(future, worker, self.state.attempts.get((stage.id, index), 0))
        number = self.state.new_attempt(stage.id, index)
        other = self._route(stage, index, number, exclude=worker)
        elapsed = time.perf_counter() - self._started.pop(future)[1]
        median = statistics.median(self._finished[stage.id])
        log.info(
            "stage %d task %d: a straggler on %s (%.1fs, its stage's median %.1fs); attempt %d started on %s",
            *(stage.id, index, worker, elapsed, median, number, other),
        )
        self.state.events.task_started(stage.id, index, other, number)
        second = _Attempt(self._submit(stage, self._tasks[stage.id][index], other, number), other, number)
        race = _Race(stage, index, (first, second))
        self._races[race.outcome] = race
        del running[future]
        running[race.outcome] = (stage, index)

    def _settle(self, race: _Race) -> None:
        """Note the attempts that ended (or whose worker was given up on); end the race when one
        succeeded or both failed."""
        for attempt in race.attempts:
            if attempt.failure is not None:
                continue
            if attempt.future.done() and attempt.future.exception() is None:
                self._won(race, attempt)
                return
            error = attempt.future.exception() if attempt.future.done() else self._given_up(attempt.worker)
            if error is not None:
                attempt.failure = error
                if (lost := lost_worker(error)) is not None:
                    self.state.retry.mark_dead(lost, error)
                elif draining_worker(error) is not None:
                    self.state.note_draining(attempt.worker, race.stage.id, race.index)
        failed = [a for a in race.attempts if a.failure is not None]
        # both failed: the query's own error if either is one, reported and handled by the scheduler
        last = (
            next(
                (a for a in failed if lost_worker(a.failure) is None and draining_worker(a.failure) is None),
                failed[-1],
            )
            if len(failed) == 2
            else None
        )
        for attempt in failed:
            if attempt is not last and not attempt.reported and attempt.failure is not None:
                attempt.reported = True
                self.state.events.task_failed(
                    race.stage.id, race.index, attempt.worker, attempt.number, attempt.failure
                )
                log.info(
                    "stage %d task %d: attempt %d on %s failed: %s",
                    *(race.stage.id, race.index, attempt.number, attempt.worker, attempt.failure),
                )
        if last is not None:
            del self._races[race.outcome]
            self.state.placement[race.stage.id][race.index] = last.worker
            race.outcome.set_exception(last.failure)

    def _won(self, race: _Race, winner: _Attempt) -> None:
        """`winner` succeeded first: its result is the task's; the other attempt is stopped."""
        del self._races[race.outcome]
        stage, index = race.stage.id, race.index
        self.state.placement[stage][index] = winner.worker
        self._winners[stage, index] = winner.number
        for loser in race.attempts:
            if loser is not winner and loser.failure is None:
                log.info(
                    "stage %d task %d: attempt %d on %s won; attempt %d on %s stopped",
                    *(stage, index, winner.number, winner.worker, loser.number, loser.worker),
                )
                key = TaskKey(self.state.query_id, stage, index, loser.number)
                stop_attempt(self.state, loser.worker, key)
        race.outcome.set_result(winner.future.result())
