"""The engines a sqllogictest file runs in, side by side, and the outcome of one statement.

* `PlainEngine`: single-node DataFusion, `ctx.sql(sql).to_arrow_table()` (the reference).
* `DistributedEngine`: the same SQL through a `DistributedContext`.
* `PlanEngine`: single-node DataFusion executing the physical plan of `ctx.sql(sql)` itself,
  every partition at once (the reference of the roundtrip mode).
* `RoundtripEngine`: like `PlanEngine`, but the plan first goes through DataFusion's own
  serialisation (`to_bytes` / `from_bytes`): what it loses, a distributed plan loses too.

Every call runs in a daemon thread under a wall-clock limit: DataFusion cannot be interrupted
from Python, so a query that hangs is abandoned (and reported) instead of hanging the run.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from datafusion import DataFrame, SessionConfig, SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.api.context import DistributedContext
from datafusion_distributed.distributed_planner.fidelity import why_kept_on_one_node
from datafusion_distributed.distributed_planner.series_repair import bytes_as_sent
from datafusion_distributed.protocol.resolver import WorkerResolver
from datafusion_distributed.runtime.streaming import stream_partitions

__all__ = [
    "DistributedEngine",
    "Engine",
    "Outcome",
    "PlainEngine",
    "PlanEngine",
    "RoundtripEngine",
    "guarded",
    "session_config",
]

# Where an error arose (Outcome.stage).
PLAN, SERIALISE, DESERIALISE, EXECUTE, TIMEOUT = "plan", "serialise", "deserialise", "execute", "timeout"


def session_config() -> SessionConfig:
    """The configuration DataFusion's own sqllogictest runner uses."""
    return SessionConfig().with_target_partitions(4).with_information_schema(True)


@dataclass(frozen=True)
class Outcome:
    """What one engine made of one statement: a table, or an error (with the stage it arose
    in), and how long it took."""

    table: pa.Table | None
    error: str | None
    seconds: float
    stage: str = ""
    tasks: int = 1  # tasks the statement ran as (distributed: over all its stages)
    streamed: bool = False  # distributed: some of its exchanges streamed
    kept: str | None = None  # roundtrip: why DistributedContext keeps the plan on one node

    @property
    def ok(self) -> bool:
        """Whether the statement succeeded."""
        return self.error is None

    @property
    def hung(self) -> bool:
        """Whether the statement was abandoned for not finishing in time."""
        return self.stage == TIMEOUT


class EngineError(Exception):
    """An error raised at a known stage of running a statement."""

    def __init__(self, stage: str, cause: BaseException):
        super().__init__(str(cause) or type(cause).__name__)
        self.stage = stage


def guarded(run: Callable[[], pa.Table | tuple[pa.Table, int, bool]], timeout: float) -> Outcome:
    """Run `run` (giving a table, or a table, the tasks it ran as and whether some of its
    exchanges streamed) in a daemon thread for
    at most `timeout` seconds; any error becomes the outcome (DataFusion's panics included),
    as does a call that does not finish in time."""
    future: Future = Future()

    def target() -> None:
        try:
            future.set_result(run())
        except BaseException as exc:  # handed to the caller as the outcome
            future.set_exception(exc)

    start = time.perf_counter()
    threading.Thread(target=target, name="slt-statement", daemon=True).start()
    try:
        result = future.result(timeout)
    except concurrent.futures.TimeoutError:
        return Outcome(None, f"did not finish within {timeout:g} s", time.perf_counter() - start, TIMEOUT)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        stage = exc.stage if isinstance(exc, EngineError) else EXECUTE
        message = str(exc).strip() or type(exc).__name__
        return Outcome(None, message, time.perf_counter() - start, stage)
    seconds = time.perf_counter() - start
    if isinstance(result, tuple):
        return Outcome(result[0], None, seconds, tasks=result[1], streamed=result[2])
    return Outcome(result, None, seconds)


class Engine(Protocol):
    """One side of the comparison; a fresh one per file."""

    name: str

    def run(self, sql: str, timeout: float) -> Outcome:
        """Run one statement, in at most `timeout` seconds; every error becomes the outcome."""
        ...

    def resync(self, sql: str, timeout: float) -> None:
        """Apply `sql` the reference way (after this engine failed on a statement the
        reference ran), so that later records see the same tables."""

    def close(self) -> None:
        """Release what the engine holds (a distributed engine's cluster)."""
        ...


def _planned(ctx: SessionContext, sql: str) -> DataFrame:
    try:
        return ctx.sql(sql)
    except BaseException as exc:
        raise EngineError(PLAN, exc) from exc


def _collect(df: DataFrame) -> pa.Table:
    return df.to_arrow_table()


def _execute(ctx: SessionContext, plan: ExecutionPlan, schema: pa.Schema) -> pa.Table:
    """Every partition of `plan` at once (they may wait on each other), as one table."""
    batches = list(stream_partitions(ctx, plan))
    if not batches:
        return schema.empty_table()
    first = batches[0].schema
    return pa.Table.from_batches([b if b.schema == first else b.cast(first) for b in batches], first)


class _SingleNodeEngine:
    """An engine over its own single-node SessionContext, with nothing to resync or release."""

    name: str

    def __init__(self) -> None:
        self.ctx = SessionContext(session_config())

    def resync(self, sql: str, timeout: float) -> None:
        """Nothing to do: a reference engine ran the statement already, and the roundtrip
        engine runs the original plan itself when its decoded plan cannot be made."""

    def close(self) -> None:
        """Nothing to release."""


class PlainEngine(_SingleNodeEngine):
    """Single-node DataFusion, the reference."""

    name = "datafusion"

    def run(self, sql: str, timeout: float) -> Outcome:
        """Run one statement, in at most `timeout` seconds; every error becomes the outcome."""
        return guarded(lambda: _collect(_planned(self.ctx, sql)), timeout)


class DistributedEngine:
    """The SQL through a DistributedContext over `workers` (None: its embedded cluster)."""

    name = "distributed"

    def __init__(self, workers: Sequence[str] | WorkerResolver | None, options: dict[str, Any]):
        self.ctx = SessionContext(session_config())
        self.dctx = DistributedContext(self.ctx, workers, **options)  # config, handlers

    def run(self, sql: str, timeout: float) -> Outcome:
        """Run one statement through the DistributedContext; the outcome also counts its tasks."""

        def run() -> tuple[pa.Table, int, bool]:
            try:
                df = self.dctx.sql(sql)
            except BaseException as exc:
                raise EngineError(PLAN, exc) from exc
            table = df.to_arrow_table()
            metrics = getattr(df, "metrics", None)  # None for EXPLAIN ANALYZE's own frame
            tasks = sum(len(s.tasks) for s in metrics.stages.values()) if metrics is not None else 1
            return table, tasks, bool(metrics is not None and metrics.streamed_stages)

        return guarded(run, timeout)

    def resync(self, sql: str, timeout: float) -> None:
        """Run `sql` on the plain SessionContext under the DistributedContext, as the reference did."""
        guarded(lambda: _collect(self.ctx.sql(sql)), timeout)

    def close(self) -> None:
        """Close the DistributedContext (and its embedded cluster)."""
        self.dctx.close()


class PlanEngine(_SingleNodeEngine):
    """Single-node DataFusion running the physical plan of each statement partition by
    partition: the reference the roundtrip engine is compared with."""

    name = "plan"

    def run(self, sql: str, timeout: float) -> Outcome:
        """Run one statement's physical plan, every partition at once, in at most `timeout` seconds."""

        def run() -> pa.Table:
            df = _planned(self.ctx, sql)
            return _execute(self.ctx, df.execution_plan(), df.schema())

        return guarded(run, timeout)


class RoundtripEngine(_SingleNodeEngine):
    """Single-node DataFusion running the physical plan decoded from its own bytes.

    When the plan cannot be encoded or decoded, the original plan runs instead (so a table
    the statement writes exists for later records) and the outcome is the error, at stage
    "serialise" or "deserialise"."""

    name = "roundtrip"

    def run(self, sql: str, timeout: float) -> Outcome:
        """Run one statement's plan decoded from its own bytes; the outcome also says why
        DistributedContext would keep that plan on one node."""

        def run() -> pa.Table:
            df = _planned(self.ctx, sql)
            try:
                plan = df.execution_plan()
            except BaseException as exc:
                raise EngineError(PLAN, exc) from exc
            kept.append(why_kept_on_one_node(plan, self.ctx, df.logical_plan().display_indent_schema()))
            try:
                data = bytes_as_sent(plan)  # DataFusion's bytes, with the planner's repairs
            except BaseException as exc:
                self._run_quietly(plan, df.schema())
                raise EngineError(SERIALISE, exc) from exc
            try:
                decoded = ExecutionPlan.from_bytes(self.ctx, data)
            except BaseException as exc:
                self._run_quietly(plan, df.schema())
                raise EngineError(DESERIALISE, exc) from exc
            return _execute(self.ctx, decoded, df.schema())

        kept: list[str | None] = []
        outcome = guarded(run, timeout)
        return dataclasses.replace(outcome, kept=kept[0] if kept else None)

    def _run_quietly(self, plan: ExecutionPlan, schema: pa.Schema) -> None:
        try:
            _execute(self.ctx, plan, schema)
        except Exception:  # the reference engine reports this statement's own errors
            pass
