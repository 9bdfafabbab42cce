"""Resolve a stage input for one task: which producer files make each partition it reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..codec import ScannedFile
from ..execution_plans.stage import BoundaryKind, StageInput
from ..worker.task_execution import ResolvedInput, TaskOutput


def resolve_input(
    stage_input: StageInput,
    partitions: Sequence[int],
    producer_outputs: Sequence[TaskOutput],
    locate: Callable[[int, int, str], ScannedFile],
) -> ResolvedInput:
    """Group producer output files by the consumer partition they make up.

    `locate(producer_task, partition, path)` gives the file as the consumer will read it (in
    place on the same machine, or after fetching it).
    """
    kind = stage_input.kind

    def files(partition: int) -> tuple[ScannedFile, ...]:
        found = []
        for task, output in enumerate(producer_outputs):
            part = output.partitions[partition] if partition < len(output.partitions) else None
            if part is not None and part.path is not None:
                found.append(locate(task, partition, part.path))
        return tuple(found)

    schema = next((output.schema for output in producer_outputs if output.schema is not None), None)
    if schema is None:
        groups = None
    elif kind is BoundaryKind.SHUFFLE:
        groups = tuple(files(q) for q in partitions)
    elif kind is BoundaryKind.COALESCE:
        groups = (files(0),)
    else:  # MERGE: one sorted stream per producer task
        groups = tuple(
            (locate(t, 0, out.partitions[0].path),) if out.partitions and out.partitions[0].path else ()
            for t, out in enumerate(producer_outputs)
        )
    return ResolvedInput(
        stage_input.marker, kind, groups, schema, stage_input.boundary, stage_input.boundary_child
    )
