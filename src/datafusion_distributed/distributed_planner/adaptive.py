"""Re-plan a stage from the sizes its inputs really hold, once the stages it reads are written.

The planner fixes every stage's tasks from DataFusion's estimates, which are missing for CSV
and JSON, a guess after a filter, and blind to skew. When a stage's producers are complete the
coordinator knows exactly what each wrote for each partition; an `AdaptRequest` built here
carries that to the handlers (`events.defaults.InputSizeAdaptation` unless a user answers),
and their `Adaptation` is applied here:

- the partitions the stage shares out are dealt to fewer tasks, in contiguous runs of about
  equal bytes (never more tasks than planned: the plan was made for that many; as many tasks
  as planned, nothing split, is the plan as it was);
- a skewed partition goes to tasks of its own, each reading its files from some of the
  producers and the stage's other inputs whole (`skew`);
- a stage that reads only other stages and feeds the query's last stage, run as one task in
  the coordinator, runs inside it instead: its plan is spliced in at its input marker, and
  its own inputs become that stage's;
- a stage whose output the probe side of a partitioned join would read, when the join's
  build side turned out small, runs inside the join's stage instead, the join collecting its
  build side whole in each of the tasks that take over the stage's (`broadcast`): one shuffle
  fewer. The scheduler holds such a stage until the build side is written (`build_side_of`).

Every result is a plan one task over all its inputs would compute the same way: only what each
task reads changes, never a plan's bytes (but for the splice of a whole stage).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..codec import replace_subtree
from ..codec.joins import repartition_input
from ..common.dealing import deal
from ..events.handlers import Adaptation, AdaptiveDecision, AdaptRequest
from ..execution_plans.stage import BoundaryKind, DistributedPlan, Stage, TaskPlan

Results = Mapping[int, Sequence[Any]]  # producer stage id -> its tasks' results (TaskResult)


def _shared_inputs(stage: Stage) -> list[int]:
    """The inputs whose partitions the stage's tasks share out."""
    return [i for i, inp in enumerate(stage.inputs) if inp.split]


def _reshapeable(stage: Stage, results: Results) -> bool:
    """Whether the stage's tasks can be dealt its inputs' partitions anew: it shares out
    inputs only (every task runs the same plan over the same scans, and no feed), all of one
    partition count, none of them empty (an empty input makes the stage one task anyway)."""
    shared = [stage.inputs[i] for i in _shared_inputs(stage)]
    first = stage.tasks[0]
    return (
        bool(shared)
        and not stage.feeds
        and all(task.plan == first.plan and task.scans == first.scans for task in stage.tasks)
        and all(inp.where.kind in (BoundaryKind.SHUFFLE, BoundaryKind.MEMORY) for inp in shared)
        and len({inp.partitions for inp in shared}) == 1
        and all(any(out.schema is not None for out in results[inp.producer]) for inp in shared)
    )


def _partition_totals(outputs: Sequence[Any], count: int) -> tuple[list[int], list[int]]:
    """Per partition, the rows and the bytes every producer task wrote for it."""
    rows, sizes = [0] * count, [0] * count
    for out in outputs:
        for q, part in enumerate(out.partitions[:count]):
            if part.path is not None:
                rows[q] += part.rows
                sizes[q] += part.bytes
    return rows, sizes


def _written_bytes(outputs: Sequence[Any]) -> int:
    """The bytes the producer tasks of `outputs` wrote, over every partition."""
    return sum(part.bytes for out in outputs for part in out.partitions)


def can_fold(plan: DistributedPlan, stage: Stage) -> bool:
    """Whether `stage` may run inside the query's last stage: that stage reads it, runs as one
    task in the coordinator and writes no files, and `stage` reads only other stages."""
    final = plan.final
    return (
        stage.id != final.id
        and final.task_count == 1
        and final.sink is None
        and stage.sink is None
        and not stage.feeds
        and not any(files for task in stage.tasks for _, files in task.scans)
        and sum(inp.producer == stage.id for inp in final.inputs) == 1
    )


def build_side_of(plan: DistributedPlan, stage: Stage) -> int | None:
    """The id of the stage writing the build side of the join that could read `stage`'s
    output without a shuffle (see `distributed_planner.broadcast`), if there is one."""
    join = _join_probing(plan, stage)
    if join is None or join.broadcast is None:
        return None
    return join.inputs[join.broadcast.build].producer


def _join_probing(plan: DistributedPlan, stage: Stage) -> Stage | None:
    """The stage whose broadcast candidate join reads `stage`'s output as its probe side."""
    return next(
        (
            s
            for s in plan.stages
            if s.broadcast is not None and s.inputs[s.broadcast.probe].producer == stage.id
        ),
        None,
    )


def adapt_request(plan: DistributedPlan, stage: Stage, results: Results, config: Any) -> AdaptRequest | None:
    """What the handlers are asked about `stage`, whose producers are complete in `results`;
    None when nothing about it can change."""
    foldable = can_fold(plan, stage)
    build = build_side_of(plan, stage)
    build_size = None
    if build is not None and build in results:
        outputs = results[build]
        build_size = (sum(p.rows for o in outputs for p in o.partitions), _written_bytes(outputs))
    if not _reshapeable(stage, results):
        if not foldable and build_size is None:
            return None
        whole = sum(_written_bytes(results[inp.producer]) for inp in stage.inputs)
        return AdaptRequest(stage, (), (), whole, (), foldable, config, build_size)
    shared = _shared_inputs(stage)
    count = stage.inputs[shared[0]].partitions
    rows, sizes, skew_bytes = [0] * count, [0] * count, []
    for i in shared:
        input_rows, input_sizes = _partition_totals(results[stage.inputs[i].producer], count)
        rows = [a + b for a, b in zip(rows, input_rows, strict=True)]
        sizes = [a + b for a, b in zip(sizes, input_sizes, strict=True)]
        if i in stage.skew_inputs:
            skew_bytes.append(tuple(input_sizes))
    shares = tuple(
        max([1] + [len(_files(results, stage, i, q)) for i in stage.skew_inputs]) for q in range(count)
    )
    whole = sum(_written_bytes(results[inp.producer]) for inp in stage.inputs if not inp.split)
    return AdaptRequest(
        stage, tuple(sizes), tuple(rows), whole, shares, foldable, config, build_size, tuple(skew_bytes)
    )


def _files(results: Results, stage: Stage, index: int, partition: int) -> list[tuple[int, int]]:
    """(producer task, bytes) of every file input `index` of `stage` has for `partition`."""
    found = []
    for task, out in enumerate(results[stage.inputs[index].producer]):
        part = out.partitions[partition] if partition < len(out.partitions) else None
        if part is not None and part.path is not None and part.bytes > 0:
            found.append((task, part.bytes))
    return found


def adapt(
    plan: DistributedPlan, request: AdaptRequest, adaptation: Adaptation, results: Results, by: str = ""
) -> tuple[DistributedPlan, AdaptiveDecision | None]:
    """`plan` with `adaptation` applied to the request's stage, and the record of what changed
    (None when nothing did)."""
    stage = request.stage
    if adaptation.broadcast:
        join = _join_probing(plan, stage)
        if join is None or join.broadcast is None or request.build_size is None:
            raise ValueError(f"stage {stage.id} feeds no join that could collect its build side")
        rows, size = request.build_size
        record = AdaptiveDecision(
            stage.id,
            stage.task_count,
            0,
            request.input_bytes,
            request.input_rows,
            folded_into=join.id,
            broadcast=(join.inputs[join.broadcast.build].producer, rows, size),
            by=by,
        )
        return broadcast_switched(plan, join, stage), record
    if adaptation.fold:
        record = AdaptiveDecision(
            stage.id,
            stage.task_count,
            0,
            request.input_bytes,
            request.input_rows,
            folded_into=plan.final.id,
            by=by,
        )
        return folded(plan, stage), record
    if not request.partition_bytes or (not adaptation.split and adaptation.tasks >= stage.task_count):
        return plan, None  # as planned
    new, split = _dealt(stage, adaptation, request, results)
    if not split and [t.input_partitions for t in new.tasks] == [t.input_partitions for t in stage.tasks]:
        return plan, None
    record = AdaptiveDecision(
        stage.id, stage.task_count, new.task_count, request.input_bytes, request.input_rows, split, by=by
    )
    return replanned(plan, dataclasses.replace(new, reason=f"adaptive: {record.describe()}")), record


def _dealt(
    stage: Stage, adaptation: Adaptation, request: AdaptRequest, results: Results
) -> tuple[Stage, tuple[tuple[int, int], ...]]:
    """`stage` with its shared-out partitions dealt to tasks as `adaptation` says, and the
    (partition, tasks) of each partition shared out over several tasks."""
    shared = _shared_inputs(stage)
    template = stage.tasks[0]
    whole_parts = [tuple(range(inp.partitions)) for inp in stage.inputs]
    tasks: list[TaskPlan] = []

    def add(partitions: tuple[int, ...], producers: tuple[tuple[int, ...] | None, ...] = ()) -> None:
        parts = tuple(partitions if i in shared else whole_parts[i] for i in range(len(stage.inputs)))
        tasks.append(TaskPlan(len(tasks), template.plan, parts, template.scans, producers))

    split = []
    for partition, shares in sorted(dict(adaptation.split).items()):
        # the input with the most files for the partition (then bytes) is shared out: the
        # others are read whole
        def weight(i: int, partition: int = partition) -> tuple[int, int]:
            files = _files(results, stage, i, partition)
            return len(files), sum(size for _, size in files)

        side = max(stage.skew_inputs, key=weight)
        groups = _deal(_files(results, stage, side, partition), shares)
        split.append((partition, len(groups)))
        for group in groups:
            add((partition,), tuple(group if i == side else None for i in range(len(stage.inputs))))
    rest = [q for q in range(len(request.partition_bytes)) if q not in dict(split)]
    if rest:
        weights = [request.partition_bytes[q] for q in rest]
        for run in balanced_runs(rest, weights, adaptation.tasks):
            add(tuple(run))
    return dataclasses.replace(stage, tasks=tuple(tasks)), tuple((q, n) for q, n in split if n > 1)


def _deal(items: list[tuple[int, int]], groups: int) -> list[tuple[int, ...]]:
    """Deal (key, weight) items into at most `groups` groups of about equal weight, largest
    first; each group's keys in order.

    Examples:
        >>> _deal([(0, 10), (1, 30), (2, 20)], 2)
        [(1,), (0, 2)]
    """
    return [tuple(sorted(keys)) for keys, _ in deal(items, groups) if keys]


def balanced_runs(items: Sequence[int], weights: Sequence[int], runs: int) -> list[list[int]]:
    """`items` cut into `runs` (at most one per item) contiguous, non-empty runs of about
    equal weight.

    Examples:
        >>> balanced_runs([0, 1, 2, 3], [90, 5, 3, 2], 2)
        [[0], [1, 2, 3]]
        >>> balanced_runs([0, 1, 2, 3], [0, 0, 0, 0], 2)
        [[0, 1], [2, 3]]
    """
    runs = max(1, min(runs, len(items)))
    if not any(weights):
        weights = [1] * len(items)
    cut, start = [], 0
    for k in range(runs - 1):
        left = runs - k  # runs still to make, this one included
        target = sum(weights[start:]) / left
        end, total = start + 1, weights[start]
        while end <= len(items) - left and total + weights[end] / 2 <= target:
            total += weights[end]
            end += 1
        cut.append(list(items[start:end]))
        start = end
    cut.append(list(items[start:]))
    return cut


def folded(plan: DistributedPlan, stage: Stage) -> DistributedPlan:
    """`plan` with `stage` run inside the last stage (see `can_fold`): its plan spliced in
    where the last stage read it, its inputs read there whole, in its place."""
    final = plan.final
    index = next(i for i, inp in enumerate(final.inputs) if inp.producer == stage.id)
    marker = final.inputs[index].where.marker
    own = tuple(dataclasses.replace(inp, split=False) for inp in stage.inputs)
    task = final.tasks[0]
    parts = task.input_partitions
    whole = tuple(tuple(range(inp.partitions)) for inp in own)
    merged = TaskPlan(
        0,
        replace_subtree(task.plan, marker, stage.plan),
        parts[:index] + whole + parts[index + 1 :],
        task.scans,
    )
    final = dataclasses.replace(
        final,
        plan=replace_subtree(final.plan, marker, stage.plan),
        inputs=final.inputs[:index] + own + final.inputs[index + 1 :],
        tasks=(merged,),
        skew_inputs=(),
        broadcast=None,  # made for the plan before the splice
    )
    stages = tuple(s for s in plan.stages[:-1] if s.id != stage.id) + (final,)
    return dataclasses.replace(plan, stages=stages)


def broadcast_switched(plan: DistributedPlan, join: Stage, probe: Stage) -> DistributedPlan:
    """`plan` with the broadcast candidate join of stage `join` collecting its build side, and
    stage `probe`, which wrote its probe side, running inside it: each of its tasks becomes a
    task of `join`, its work (below its repartition) where `join` read it, its inputs read
    there as it read them; the build side is read whole by every task."""
    variant = join.broadcast
    if variant is None:
        raise ValueError(f"stage {join.id} has no broadcast variant")
    marker = join.inputs[variant.probe].where.marker
    own = join.inputs[: variant.probe] + probe.inputs + join.inputs[variant.probe + 1 :]
    inputs = tuple(
        dataclasses.replace(inp, split=False) if inp.producer == join.inputs[variant.build].producer else inp
        for inp in own
    )
    whole = [tuple(range(inp.partitions)) for inp in join.inputs]
    tasks = []
    for task in probe.tasks:
        parts = tuple(whole[: variant.probe]) + task.input_partitions + tuple(whole[variant.probe + 1 :])
        producers = (
            (None,) * variant.probe + task.input_producers + (None,) * (len(join.inputs) - variant.probe - 1)
            if task.input_producers
            else ()
        )
        plan_bytes = replace_subtree(variant.plan, marker, repartition_input(task.plan))
        tasks.append(TaskPlan(task.index, plan_bytes, parts, join.tasks[0].scans + task.scans, producers))
    switched = dataclasses.replace(
        join,
        root=variant.root,
        plan=replace_subtree(variant.plan, marker, repartition_input(probe.plan)),
        inputs=inputs,
        tasks=tuple(tasks),
        skew_inputs=(),
        broadcast=None,
        reason=f"adaptive: its join collects stage {join.inputs[variant.build].producer} whole, "
        f"stage {probe.id}'s {len(tasks)} task(s) run here",
    )
    stages = tuple(switched if s.id == join.id else s for s in plan.stages if s.id != probe.id)
    return dataclasses.replace(plan, stages=stages)


def replanned(plan: DistributedPlan, stage: Stage) -> DistributedPlan:
    """`plan` with `stage` in place of the stage of the same id."""
    return dataclasses.replace(plan, stages=tuple(stage if s.id == stage.id else s for s in plan.stages))
