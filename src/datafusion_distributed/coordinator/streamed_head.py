"""The last stage run in the coordinator while its producers run: it reads their streams as
they come, so a query's first rows (and a LIMIT's whole answer) need not wait for the stages
before it to end.

The other stages run in a thread of their own (`QueryRun.run_stages`); the head starts once
every input it reads is readable (a stream: its producers placed; files: written). When the
head has its answer, nothing new starts and the stages still running are left to finish, so
their metrics come in: a producer whose reader went away (a limit met) stops at once, whatever
it was doing. When the head fails, they are abandoned, and stopped by the query's release.

A producer's own error reaches the head through its stream and fails the query with its
message. A stream that broke off (a lost worker, the query released) only echoes the cause,
which the producers' run reports: when a worker was lost, the stages still needed run again
with spooled exchanges, and the head after them, if no batch was handed out yet or the caller
can drop those it was given (as `HeadStage.gather` recovers).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from typing import Protocol

import pyarrow as pa

from ..common.threads import kept_threads
from ..errors import ResultStreamLost
from ..execution_plans.stage import StageInput
from ..protocol.flight import draining_worker, lost_worker
from ..runtime import streams
from .cancellation import POLL_SECONDS
from .head import HeadStage
from .run_state import RunState
from .streaming import StreamBroken, close_stage, is_echo

log = logging.getLogger("datafusion_distributed.coordinator")
# how long a head waits for the stages still running to end once it ended, and for the cause
# of a stream that broke off under it
ENDING_SECONDS = 5.0


class HeadEnd:
    """What a head reading streams tells the run of its producers: that it ended, and whether
    the stages still running are abandoned rather than left to finish."""

    def __init__(self) -> None:
        self.ended: Future[None] = Future()
        self.abandon = False

    def end(self, abandon: bool) -> None:
        """The head ended; with `abandon`, the producers' run returns at its next turn."""
        self.abandon = self.abandon or abandon
        if not self.ended.done():
            self.ended.set_result(None)

    def stops(self, waiting: bool) -> bool:
        """Whether the producers' run stops now, with stages `waiting` to start or not."""
        return self.ended.done() and (waiting or self.abandon)

    def wake(self) -> tuple[Future[None], ...]:
        """A future to wait on beside the tasks, done when the head ends (once)."""
        return () if self.ended.done() else (self.ended,)


class StagesRun(Protocol):
    """What a streamed head needs of the run of the stages before it (a `QueryRun`)."""

    state: RunState
    head: HeadStage
    progress: threading.Condition  # notified as stages start and finish

    def run_stages(self, stage_ids: Sequence[int], head: HeadEnd | None = None) -> None:
        """Run the stages `stage_ids`, until `head` ends."""

    def readable(self, inp: StageInput) -> bool:
        """Whether a stage may start reading its input `inp`."""

    def run_spooled(self, broken: StreamBroken, stage_ids: list[int]) -> None:
        """Run the stages of `stage_ids` still needed again, spooled, after `broken`."""


class StreamedHead:
    """Runs a query whose last stage reads streams in the coordinator (see the module docstring)."""

    def __init__(self, query: StagesRun, on_restart: Callable[[], None] | None) -> None:
        self.query = query
        self.on_restart = on_restart
        self.others = [stage.id for stage in query.state.plan.stages[:-1]]

    def run(self) -> Iterator[pa.RecordBatch]:
        """The query's result batches."""
        head = HeadEnd()
        producers = kept_threads.submit(self._produce, head)
        delivered = 0
        broken: StreamBroken | None = None
        try:
            self._wait_for_inputs(producers)
            for batch in self.query.head.single_task():
                yield batch
                delivered += 1
            self._finish(head, producers)
        except GeneratorExit:
            raise
        except BaseException as exc:
            cause = self._cause(exc, producers)
            if not isinstance(cause, StreamBroken):
                if cause is exc:
                    raise
                raise cause from None
            broken = cause
        finally:
            head.end(abandon=True)
            if not wait([producers], timeout=ENDING_SECONDS).done:
                log.warning("the stages before the head did not stop within %.0fs", ENDING_SECONDS)
        if broken is not None:
            yield from self._spooled(broken, delivered)

    def _produce(self, head: HeadEnd) -> None:
        """Run the stages before the head; a failure breaks the head's streams off, so it stops
        waiting on them."""
        try:
            self.query.run_stages(self.others, head)
        except BaseException:
            streams.release(self.query.state.query_id)
            raise

    def _wait_for_inputs(self, producers: Future[None]) -> None:
        """Wait until the head may read each of its inputs (or raise the producers' failure)."""
        query = self.query
        final = query.state.plan.final
        with query.progress:
            while not all(query.readable(inp) for inp in final.inputs):
                query.state.cancel_scope.check()
                if producers.done():
                    producers.result()  # raises why they stopped
                    raise AssertionError("the stages before the head ended without its inputs")
                query.progress.wait(POLL_SECONDS)

    def _finish(self, head: HeadEnd, producers: Future[None]) -> None:
        """The head read all it needs: what it did not read lets its producers end, and they
        are left to finish (within `ENDING_SECONDS`) so that their metrics come in. A failure
        of theirs now changes nothing the head answered."""
        state = self.query.state
        for inp in state.plan.final.inputs:
            if state.streams.streams(inp):
                workers = state.placement.get(inp.producer, [])
                close_stage(state.query_id, inp.producer, state.services, workers)
        head.end(abandon=False)
        if not wait([producers], timeout=ENDING_SECONDS).done:
            return  # abandoned on the way out
        if (late := producers.exception()) is not None:
            log.info("query %s: a stage failed after the head had its answer: %s", state.query_id, late)

    def _cause(self, exc: BaseException, producers: Future[None]) -> BaseException:
        """What failed the query when the head failed with `exc`: the producers' own failure
        when their run raised, or will (`exc` then echoes it: a stream broke off), else `exc`."""
        if not producers.done() and is_echo(exc):
            wait([producers], timeout=ENDING_SECONDS)
        if producers.done() and (failure := producers.exception()) is not None:
            return failure
        return exc

    def _spooled(self, broken: StreamBroken, delivered: int) -> Iterator[pa.RecordBatch]:
        """After `broken`, the stages still needed, and the head, run again with spooled
        exchanges; or ResultStreamLost when batches were handed out that cannot be dropped."""
        if delivered:
            if self.on_restart is None:
                cause = broken.__cause__ if broken.__cause__ is not None else broken
                if (lost := lost_worker(cause)) is not None:
                    self.query.state.retry.mark_dead(lost, cause)  # reported, and avoided later
                worker = lost or draining_worker(cause) or "unknown"
                raise ResultStreamLost(worker, delivered) from broken
            self.on_restart()
        self.query.run_spooled(broken, self.others)
        yield from self.query.head.single_task()
