"""Which exchanges of a run stream, and what streaming changes in how its stages run.

An exchange streams (`exchange = "stream"` or `"auto"`) when its producer stage's outputs are
read by exactly one consumer stage, each output partition by one consumer task: shuffles,
coalesces and merges, not broadcasts nor shipped tables. Its consumer then starts as soon as
its producers have started, and both run at once: the cluster's workers run every task they
are sent at once (each in a thread of its own), so no producer ever waits for a slot its own
consumer holds, and each channel's bounded buffer is the back-pressure. It never streams:
- into the last stage when that runs in the coordinator or writes files (the coordinator reads
  files), nor out of a stage whose feed is read in rounds;
- between processes: the channels of this version live in one process, so only the embedded
  cluster (workers and coordinator in this process) streams.
Stages that stream, read a stream, or feed a stage that does are never re-planned from their
inputs' sizes (there are none yet) nor raced by speculation. A streamed run whose worker is
lost stops its streams and runs the stages that streamed again, spooled (`StreamBroken`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..execution_plans.stage import BoundaryKind, DistributedPlan, StageInput
from ..protocol.messages import StreamChannel, TaskInput
from ..runtime import streams

STREAMABLE = (BoundaryKind.SHUFFLE, BoundaryKind.COALESCE, BoundaryKind.MERGE)


# What a task says when another task of its streams failed first: never the query's error
# while the one that caused it may still come (see `is_echo`)
ECHOES = (
    "ended before its producer finished",
    "was released while",
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
    `pinned` the stages that keep the shape they were planned with (see the module docstring)."""

    producers: frozenset[int] = frozenset()
    pinned: frozenset[int] = frozenset()
    why_not: str = ""  # why nothing streams, when streaming was asked for

    @classmethod
    def of(cls, plan: DistributedPlan, exchange: str, in_process: bool, final_on_workers: bool) -> StreamPlan:
        """The exchanges of `plan` that stream with the setting `exchange`; `in_process` says
        whether every worker runs in this process, `final_on_workers` whether the last stage
        runs on workers (several tasks, no file write)."""
        if exchange == "spool" or len(plan.stages) < 2:
            return cls()
        if not in_process:
            return cls(why_not="the workers run in other processes: their exchanges are spooled")
        readers = Counter(inp.producer for stage in plan.stages for inp in stage.inputs)
        producers = set()
        for stage in plan.stages:
            if stage.id == plan.final.id and not final_on_workers:
                continue
            if stage.skew_inputs:
                continue
            for inp in stage.inputs:
                producer = plan.stage(inp.producer)
                if (
                    inp.table is None
                    and inp.where.kind in STREAMABLE
                    and (inp.split or stage.task_count == 1)  # each channel read by one task
                    and readers[inp.producer] == 1
                    and not any(feed.rounds for feed in producer.feeds)
                    and producer.sink is None
                ):
                    producers.add(inp.producer)
        consumers = {stage.id for stage in plan.stages if any(i.producer in producers for i in stage.inputs)}
        fed = {inp.producer for stage in plan.stages if stage.id in consumers for inp in stage.inputs}
        return cls(frozenset(producers), frozenset(producers | consumers | fed))

    def streams(self, inp: StageInput) -> bool:
        """Whether the input `inp` of a stage is read as a stream."""
        return inp.producer in self.producers


def streamed_input(
    inp: StageInput,
    parts: tuple[int, ...] | list[int],
    tasks: list[int],
    attempts: dict[tuple[int, int], int],
) -> TaskInput:
    """The input `inp` of a task, read from the channels of the producer tasks `tasks` (their
    current attempts): partition q of every producer for each shuffle partition q the task
    reads; the one partition of every producer for a coalesce; one per producer for a merge."""

    def channel(task: int, partition: int) -> StreamChannel:
        return StreamChannel("", inp.producer, task, attempts.get((inp.producer, task), 0), partition)

    kind = inp.where.kind
    if kind is BoundaryKind.SHUFFLE:
        groups = tuple(tuple(channel(t, q) for t in tasks) for q in parts)
    elif kind is BoundaryKind.COALESCE:
        groups = (tuple(channel(t, 0) for t in tasks),)
    else:  # a merge: one sorted stream per producer task
        groups = tuple((channel(t, 0),) for t in tasks)
    where = inp.where
    return TaskInput(where.marker, kind.value, None, where.boundary, where.boundary_child, None, groups)


def close_stage(query_id: str, stage: int) -> None:
    """The consumer of stage `stage`'s streams finished: channels it never read (a join whose
    build side was empty never reads its probe side) let their producers end."""
    streams.close_stage(query_id, stage)
