"""Which producer output files make up each partition a consumer task reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..execution_plans.stage import BoundaryKind, StageInput

File = TypeVar("File")


def exchange_schema(producer_outputs: Sequence[Any]) -> bytes | None:
    """The schema the producers wrote, None when the whole exchange is empty."""
    return next((out.schema for out in producer_outputs if out.schema is not None), None)


def input_groups(
    stage_input: StageInput,
    partitions: Sequence[int],
    producer_outputs: Sequence[Any],
    locate: Callable[[int, Any], File],
    producers: Sequence[int] | None = None,
) -> tuple[tuple[File, ...], ...] | None:
    """Group producer outputs (TaskOutput or TaskResult, one per producer task) by the consumer
    partition they make up; `locate(producer_task, partition_output)` names each file as the
    consumer will read it, and `producers` (default: all) are the producer tasks read. None
    when the exchange produced no rows at all."""
    if exchange_schema(producer_outputs) is None:
        return None

    def files(partition: int, tasks: Sequence[int]) -> tuple[File, ...]:
        found = []
        for task in tasks:
            parts = producer_outputs[task].partitions
            if partition < len(parts) and parts[partition].path is not None:
                found.append(locate(task, parts[partition]))
        return tuple(found)

    all_tasks = range(len(producer_outputs)) if producers is None else producers
    if stage_input.where.kind in (BoundaryKind.SHUFFLE, BoundaryKind.MEMORY):  # partition q: file q
        return tuple(files(q, all_tasks) for q in partitions)
    if stage_input.where.kind is BoundaryKind.COALESCE:
        return (files(0, all_tasks),)
    return tuple(files(0, [t]) for t in all_tasks)  # MERGE: one sorted stream per producer task


def needs_single_task(stage_inputs: Sequence[StageInput], outputs: Mapping[int, Sequence[Any]]) -> bool:
    """Whether a split input turned out empty, so the stage must run as one task (an empty
    exchange is replaced by its original subtree, which cannot be shared out by partition)."""
    return any(inp.split and exchange_schema(outputs[inp.producer]) is None for inp in stage_inputs)
