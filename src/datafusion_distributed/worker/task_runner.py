"""A worker's tasks: inputs fetched (or read in place), feed units read, the plan run in the
worker's session, and its outputs written to the spool."""

from __future__ import annotations

import functools
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable

import pyarrow.flight as flight
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import ScannedFile
from ..common.errors import failure_message, is_failure
from ..common.fs import makedirs
from ..events.chain import HandlerChain
from ..events.handlers import PlanRewriteRequest
from ..execution_plans.object_stores import ObjectStores, with_store_hint
from ..metrics.recorder import TaskRecorder
from ..protocol.auth import connect_options
from ..protocol.fetch import fetch_input
from ..protocol.flight import ClientPool, lost_worker, lost_worker_info
from ..protocol.messages import FileLocation, PartitionResult, RunTask, TaskResult
from ..runtime import streams
from ..runtime.inputs import resolve_inputs
from ..runtime.run import OutputFiles, run_task
from ..runtime.session_settings import TaskSessions, TaskSettings
from ..work_unit_feed.client import RemoteUnits
from ..work_unit_feed.reading import FeedRounds, FeedToRead, read_feeds
from .cancellation import Cancellations
from .spool import Spool

log = logging.getLogger("datafusion_distributed.worker.flight_worker")


class TaskRunner:
    """Runs the tasks sent to one worker.

    Args:
        url: the worker's URL, as errors name it.
        spool: where outputs are written and fetched inputs kept.
        cancelled: the queries and attempts cancelled on this worker.
        sessions: the sessions tasks run in (built by the first task, then shared, and copied
            for tasks carrying settings).
        handlers: event handlers whose `rewrite_plan` may replace a task's plan.
        clients: connections to other workers, for fetching inputs.
        readable_spools: spool folders whose files are read in place.
        memory_limit_bytes: the worker's DataFusion memory pool, named in errors.
        stopped: set when the worker stops (its tasks then end as lost, not failed).
    """

    def __init__(
        self,
        url: str,
        spool: Spool,
        cancelled: Cancellations,
        sessions: TaskSessions,
        handlers: HandlerChain,
        clients: ClientPool,
        readable_spools: tuple[str, ...],
        memory_limit_bytes: int | None,
        stopped: threading.Event,
    ) -> None:
        self.url = url
        self.spool = spool
        self._cancelled = cancelled
        self._sessions = sessions
        self._handlers = handlers
        self._clients = clients
        self._readable_spools = readable_spools
        self.memory_limit_bytes = memory_limit_bytes
        self._stopped = stopped

    def _read(
        self, recorder: TaskRecorder, message: RunTask, location: FileLocation
    ) -> tuple[ScannedFile, int]:
        """`_fetch`, measured by `recorder`."""
        return recorder.read(location, self._fetch, message, location)

    def _fetch(self, message: RunTask, location: FileLocation) -> tuple[ScannedFile, int]:
        """One input of a task: read in place or copied into the task's inputs folder, charged
        to the spool quota (a cancelled query fetches nothing more)."""
        folder = self.spool.inputs_dir(message.key)

        def before_copy(location: FileLocation) -> None:
            self._cancelled.check(message.key)
            self.spool.charge_input(message.key, location.size)

        def made() -> str:
            makedirs(folder)
            return folder

        return fetch_input(
            location,
            message.query_id,
            self._clients,
            made,
            self._readable_spools,
            before_copy,
            writer=f"worker {self.url}",
        )

    def run(self, message: RunTask, started: float, name: str) -> TaskResult:
        """Run the task of `message` (called `name` in logs and errors, started at `started`)
        and write its outputs to the spool; its failure is a FlightServerError saying why."""
        key = message.key
        cancelled = functools.partial(self._cancelled.is_cancelled, key)  # the query, or this attempt
        sources: list[RemoteUnits] = []  # where the task's feed scans get units, closed at its end
        try:
            self._cancelled.check(key)
            recorder = TaskRecorder(message.worker, message.inputs)
            inputs, fetched = resolve_inputs(
                message.inputs, functools.partial(self._read, recorder, message), message.query_id
            )
            ctx = self._task_session(message.settings, message.object_stores)
            leaves, rounds = self._feed_leaves(message, sources)
            ran = run_task(
                ctx,
                message.plan,
                inputs,
                leaves,
                rewrite=functools.partial(self._rewrite, message, ctx),
                rounds=rounds,
                write_to=OutputFiles(
                    self.spool.attempt_dir(key),
                    message.compression,
                    path_for=functools.partial(self.spool.attempt_output_path, key),
                    cancelled=cancelled,
                    on_write=functools.partial(self.spool.charge, message.query_id),
                ),
                stream_to=key if message.stream_output else None,
            )
            output = ran.output
            assert output is not None  # a task run with `write_to` writes files
            self.spool.finish_attempt(key)
            return TaskResult(
                partitions=tuple(
                    PartitionResult(p.partition, p.rows, p.bytes, p.path) for p in output.partitions
                ),
                schema=output.schema,
                seconds=time.perf_counter() - started,
                fetched_bytes=fetched,
                metrics=recorder.finish(ran.plan)
                if ran.rounds is None
                else recorder.finish(metrics=ran.rounds.metrics),
            )
        except BaseException as exc:  # a panic inside DataFusion fails the task like any error
            if not is_failure(exc):
                raise
            raise self._failure(message, name, exc, cancelled()) from exc
        finally:
            for source in sources:
                source.close()
            self.spool.remove_inputs(key)
            if self._cancelled.is_cancelled(message.query_id):  # outputs written after its data was deleted
                self.spool.release(message.query_id)
            elif cancelled():  # this attempt lost to another: its outputs go, the task's others stay
                self.spool.discard_attempt(key)

    def _rewrite(self, message: RunTask, ctx: SessionContext, plan: ExecutionPlan) -> ExecutionPlan:
        """`plan` as the worker's plan-rewrite handlers leave it."""
        streamed = message.stream_output or any(i.streams for i in message.inputs)
        ctx = streams.with_exchange_codec(ctx) if streamed else ctx  # a handler's plan may hold them
        request = PlanRewriteRequest(
            message.query_id, message.stage, message.task, message.attempt, plan, ctx, message.worker
        )
        return self._handlers.rewrite_plan(request)

    def _feed_leaves(
        self, message: RunTask, sources: list[RemoteUnits]
    ) -> tuple[list[tuple[bytes, bytes]], Callable[..., FeedRounds] | None]:
        """The task's feed scans read now, as (marker, leaf) to splice in; or, for one feed read
        in rounds, the rounds to make instead."""
        feeds = self._feeds_to_read(message, sources)
        check = functools.partial(self._cancelled.check, message.key)
        if len(feeds) == 1 and message.feeds[0].rounds:
            return [], functools.partial(FeedRounds, feeds[0], check)
        folder = os.path.join(self.spool.inputs_dir(message.key), "feeds")
        charge = functools.partial(self.spool.charge_input, message.key)  # like fetched inputs
        return [(f.marker, f.leaf) for f in read_feeds(feeds, folder, check, charge)], None

    def _failure(self, message: RunTask, name: str, exc: BaseException, cancelled: bool) -> Exception:
        """The error a failed task answers with, logged as what it was: stopped with the worker
        (its coordinator retries it elsewhere), cancelled, or failed."""
        if self._stopped.is_set():
            log.info("%s stopped, the worker is stopping: %s", name, exc)
            lost: str | None = message.worker
            text = "the worker is stopping"
        else:
            # its query was cancelled (a user's choice, not a failure), or released while the
            # task streamed (its reader needed no more; the release reached another worker of
            # this process first)
            if cancelled or streams.RELEASED in str(exc):
                log.debug("%s cancelled: %s", name, exc)
            else:
                log.warning("%s failed: %s", name, exc)
            lost, text = lost_worker(exc), self.describe(exc)
        extra = lost_worker_info(lost) if lost else b""
        return flight.FlightServerError(f"{name} failed: {text}", extra_info=extra)

    def _feeds_to_read(self, message: RunTask, sources: list[RemoteUnits]) -> list[FeedToRead]:
        """The task's feed scans, each asking the coordinator's feed service for units through
        a source added to `sources` (the caller closes them)."""
        s = self._clients.settings
        options = connect_options(s.auth_token, s.tls_root_certs, s.tls_client_cert, s.tls_client_key)
        feeds = []
        for f in message.feeds:
            sources.append(
                RemoteUnits(
                    f.url, message.query_id, f.token, f.scan_id, options, s.task_timeout, f.connect_timeout
                )
            )
            feeds.append(FeedToRead.of(f, pickle.loads(f.reader), f.partitions, sources[-1]))
        return feeds

    def _task_session(self, settings: TaskSettings = (), stores: ObjectStores = ()) -> SessionContext:
        """The session a task carrying `settings` and object `stores` runs in: one per worker,
        so its memory pool bounds the worker (not each task) and no task pays for building one,
        copied with the user's settings a task carries (the copies share its memory pool), its
        stores registered (see `TaskSessions`). A hook that fails is tried again by the next task."""
        return self._sessions.session(settings, stores)

    def describe(self, exc: BaseException) -> str:
        """The message of a task's failure `exc`, naming the memory limit when it was hit."""
        text = with_store_hint(failure_message(exc))
        if self.memory_limit_bytes is not None and "Resources exhausted" in text:
            return f"memory limit exceeded (the worker's limit is {self.memory_limit_bytes} bytes): {text}"
        return text
