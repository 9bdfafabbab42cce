"""Which exchanges of a run stream, and what streaming changes in how its stages run.

An exchange streams (`exchange = "stream"`) when its producer stage's outputs are
read by exactly one consumer stage, each output partition by one consumer task: shuffles,
coalesces and merges, not broadcasts nor shipped tables. Its consumer then starts as soon as
its producers have started, and both run at once: the cluster's workers run every task they
are sent at once (each in a thread of its own), so no producer ever waits for a slot its own
consumer holds, and each channel's bounded buffer is the back-pressure. The last stage, when it
is one task, runs in the coordinator reading its streams as they come (`head`: a LIMIT answers
once its rows arrive). It never streams:
- into the last stage when that writes files, nor out of a stage that reads a feed;
- to workers that serve no data plane: between processes a stream crosses the producer
  worker's data-plane server (plain TCP with the cluster's token), which a worker with TLS,
  a memory limit, a session hook or plan rewrites does not start;
- where a producer would need its worker's runtime: a sink's child runs in a task context that
  DataFusion's FFI rebuilds with a default runtime (local files, no registered object store, no
  memory limit), so a plan that scans an object store, or a cluster whose sessions a hook
  builds, spools.
`exchange = "auto"` (the default) streams only a plan whose last stage, run in the coordinator,
may stop before its inputs end (a LIMIT with no sort under it): its stages then stop once it
has its rows, instead of finishing first. Elsewhere it spools: whole queries measured no faster
streamed (benchmarks/README.md, "Streamed exchanges").
Stages that stream, read a stream, or feed a stage that does are never re-planned from their
inputs' sizes (there are none yet) nor raced by speculation. A streamed run whose worker is
lost stops its streams and runs the stages that streamed again, spooled (`StreamBroken`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..codec import scan_kind
from ..codec.scan import object_store_url
from ..distributed_planner.one_node import LOCAL_STORE
from ..errors import WORKER_ERRORS
from ..execution_plans.stage import BoundaryKind, DistributedPlan, Stage, StageInput
from ..protocol.messages import StreamChannel, TaskInput
from ..runtime import streams

if TYPE_CHECKING:
    from .services import RunServices

log = logging.getLogger("datafusion_distributed.coordinator")

# "auto" streams only a head that may stop early: measured (benchmarks/README.md, "Streamed
# exchanges"), streaming ran TPC-H SF 1 no faster than files read in place, and the stages it
# pins lose adaptive re-planning; a LIMIT over a shuffled join answered in half the time.
STREAMABLE = (BoundaryKind.SHUFFLE, BoundaryKind.COALESCE, BoundaryKind.MERGE)


# What a task says when another task of its streams failed first: never the query's error
# while the one that caused it may still come (see `is_echo`)
ECHOES = (
    "ended before its producer finished",
    streams.RELEASED,
    "is not streamed",
    "from the data plane at",
)


def is_echo(exc: BaseException) -> bool:
    """Whether a task's failure `exc` only echoes another's: a stream it read broke off."""
    return any(echo in str(exc) for echo in ECHOES)


class StreamBroken(RuntimeError):
    """A worker was lost while stages streamed: they run again with spooled exchanges."""


@dataclass(frozen=True)
class StreamPlan:
    """The exchanges of one run that stream: `producers` are the stages whose outputs do, and
    `pinned` the stages that keep the shape they were planned with (see the module docstring);
    `head` says whether the last stage, run in the coordinator, reads streams."""

    producers: frozenset[int] = frozenset()
    pinned: frozenset[int] = frozenset()
    head: bool = False

    @classmethod
    def of(
        cls,
        plan: DistributedPlan,
        exchange: str,
        reachable: Callable[[], bool],
        final_here: bool,
    ) -> StreamPlan:
        """The exchanges of `plan` that stream with the setting `exchange`; `reachable()` says
        whether streams can reach every worker and this process (all in this process, or each
        worker serving a data plane), `final_here` whether the last stage runs in the
        coordinator (one task) rather than on workers or as a file write."""
        if exchange == "spool" or len(plan.stages) < 2:
            return cls()
        if exchange == "auto" and not (final_here and stops_early(plan.final)):
            return cls()  # streams only where it was measured to pay (see above)
        if not reachable():
            log.info("exchange=%r, but not every worker serves a data plane: exchanges spooled", exchange)
            return cls()
        if (url := _object_store_read(plan)) is not None:
            log.info(
                "exchange=%r, but a scan reads %s, out of a streaming producer's reach", exchange, url[:200]
            )
            return cls()
        readers = Counter(inp.producer for stage in plan.stages for inp in stage.inputs)
        producers = set()
        for stage in plan.stages:
            if stage.id == plan.final.id and plan.write is not None:
                continue
            if stage.skew_inputs:
                continue
            for inp in stage.inputs:
                if inp.table is not None or inp.where.kind not in STREAMABLE:
                    continue  # a shipped memory table is no stage's output
                producer = plan.stage(inp.producer)
                if (
                    (inp.split or stage.task_count == 1)  # each channel read by one task
                    and readers[inp.producer] == 1
                    and not producer.feeds
                    and producer.sink is None
                ):
                    producers.add(inp.producer)
        consumers = {stage.id for stage in plan.stages if any(i.producer in producers for i in stage.inputs)}
        fed = {i.producer for s in plan.stages if s.id in consumers for i in s.inputs if i.table is None}
        head = final_here and plan.final.id in consumers
        return cls(frozenset(producers), frozenset(producers | consumers | fed), head)

    def streams(self, inp: StageInput) -> bool:
        """Whether the input `inp` of a stage is read as a stream."""
        return inp.producer in self.producers


def stops_early(stage: Stage) -> bool:
    """Whether `stage` may end before it has read all of its inputs: a limit of its own with no
    sort under it (a sort, TopK or merge, has read its inputs whole before it hands out a row)."""
    boundaries = {inp.where.boundary: inp.where.runs_boundary for inp in stage.inputs}
    pending = [stage.root]
    while pending:
        node = pending.pop()
        runs_here = boundaries.get(node.raw, True)  # an input's boundary may run here, over it
        if "Sort" in node.name:
            continue  # what is below it is read whole first
        limited = node.name in ("GlobalLimitExec", "LocalLimitExec") or (
            node.name in ("CoalescePartitionsExec", "CoalesceBatchesExec")
            and node.attribute("fetch") is not None
        )
        if runs_here and limited:
            return True
        if node.raw not in boundaries:
            pending.extend(node.children)
    return False


def _object_store_read(plan: DistributedPlan) -> str | None:
    """The URL of an object store other than local files a scan of `plan` reads, if any. A
    sink's child runs in a task context rebuilt across DataFusion's FFI, with a default runtime:
    local files, but no registered object store and no memory limit."""
    for node in plan.final.root.walk():  # the final stage's root is the whole plan's
        if scan_kind(node.raw) is not None and (url := object_store_url(node.raw)) != LOCAL_STORE:
            return url
    return None


def streamed_input(
    inp: StageInput,
    schema: bytes,
    parts: Sequence[int],
    tasks: Sequence[int],
    attempts: dict[tuple[int, int], int],
    address: Callable[[int], str],
) -> TaskInput:
    """The input `inp` of a task, read from the channels of the producer tasks `tasks` (their
    current attempts, served at `address(task)`) by a leaf declaring `schema`: partition q of
    every producer for each shuffle partition q the task reads; the one partition of every
    producer for a coalesce; one per producer for a merge. Its boundary travels as for an
    input read from files."""

    def channel(task: int, partition: int) -> StreamChannel:
        attempt = attempts.get((inp.producer, task), 0)
        return StreamChannel(address(task), inp.producer, task, attempt, partition)

    kind = inp.where.kind
    if kind is BoundaryKind.SHUFFLE:
        groups = tuple(tuple(channel(t, q) for t in tasks) for q in parts)
    elif kind is BoundaryKind.COALESCE:
        groups = (tuple(channel(t, 0) for t in tasks),)
    else:  # a merge: one sorted stream per producer task
        groups = tuple((channel(t, 0),) for t in tasks)
    where = inp.where.read_from_files()
    return TaskInput(where.marker, kind.value, schema, where.boundary, where.boundary_child, None, groups)


def close_stage(query_id: str, stage: int, services: RunServices, workers: Sequence[str]) -> None:
    """The consumer of stage `stage`'s streams finished: channels it never read (a join whose
    build side was empty never reads its probe side) let their producers end, here and on the
    `workers` that ran them."""
    streams.close_stage(query_id, stage)
    if services.data_plane is None:
        return
    for worker in sorted(set(workers)):
        try:
            services.clients.get(worker).close_stage(query_id, stage)
        except WORKER_ERRORS as exc:  # a lost worker's producers are gone with it
            log.info("closing stage %d's streams on %s: %s", stage, worker, exc)
