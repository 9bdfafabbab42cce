"""Re-planning a stage from its inputs' sizes (`distributed_planner.adaptive`), on plans cut for
four workers that never run: the producers' answers are made up here, so each rule is checked
on exact numbers."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext
from hypothesis import given
from hypothesis import strategies as st

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.distributed_planner.adaptive import adapt, adapt_request, balanced_runs
from datafusion_distributed.events import Adaptation, AdaptRequest, HandlerChain, InputSizeAdaptation
from datafusion_distributed.execution_plans.stage import DistributedPlan, Stage

WORKERS = [f"grpc://10.0.0.{i}:50051" for i in range(1, 5)]  # planning only: nothing connects
FORCED = DistributedConfig(
    bytes_per_partition=1, broadcast_inline_bytes=0, broadcast_total_rows=0, broadcast_total_bytes=0
)


@dataclass
class Part:
    rows: int
    bytes: int
    path: str | None = "written"


@dataclass
class Result:
    partitions: list[Part]
    schema: bytes | None = b"schema"


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> SessionContext:
    folder = tmp_path_factory.mktemp("tables")
    ctx = SessionContext()
    for name in ("a", "b"):
        (folder / name).mkdir()
        for part in range(4):
            table = pa.table({"k": list(range(part * 100, part * 100 + 100)), "v": [part] * 100})
            pq.write_table(table, folder / name / f"{part}.parquet")
        ctx.register_parquet(name, str(folder / name))
    return ctx


def _plan(ctx: SessionContext, sql: str, config: DistributedConfig = FORCED) -> DistributedPlan:
    return DistributedContext(ctx, workers=WORKERS, config=config).sql(sql).distributed_plan()


def _join_stage(plan: DistributedPlan) -> Stage:
    (stage,) = [s for s in plan.stages if len(s.inputs) == 2 and all(i.split for i in s.inputs)]
    return stage


def _results(
    plan: DistributedPlan, stage: Stage, sizes: dict[int, list[list[int]]]
) -> dict[int, list[Result]]:
    """Each producer's answer: `sizes[input][task][partition]` bytes (rows the same)."""
    results = {}
    for index, inp in enumerate(stage.inputs):
        producer = plan.stage(inp.producer)
        per_task = sizes.get(index, [[10] * inp.partitions] * producer.task_count)
        results[inp.producer] = [Result([Part(b, b, "f" if b else None) for b in task]) for task in per_task]
    return results


def _adapted(plan: DistributedPlan, stage: Stage, results, config: DistributedConfig):
    request = adapt_request(plan, stage, results, config.planner(len(WORKERS)))
    adaptation, _ = HandlerChain().adapt_stage(request)
    return adapt(plan, request, adaptation, results)


INNER = "SELECT a.k, a.v, b.v FROM a JOIN b ON a.k = b.k"


def test_small_inputs_make_one_task_reading_every_partition(tables) -> None:
    plan = _plan(tables, INNER)
    stage = _join_stage(plan)
    assert stage.task_count == 4
    config = DistributedConfig(adaptive_one_task_bytes=10_000)
    new, decision = _adapted(plan, stage, _results(plan, stage, {}), config)
    (task,) = new.stage(stage.id).tasks
    assert task.input_partitions == (tuple(range(8)), tuple(range(8)))
    assert (decision.planned_tasks, decision.tasks, decision.folded_into) == (4, 1, None)
    assert decision.input_bytes == 2 * 4 * 8 * 10
    assert new.stage(stage.id).reason.startswith("adaptive: 4 tasks -> 1")


def test_tasks_follow_the_bytes_and_get_partitions_of_about_equal_bytes(tables) -> None:
    plan = _plan(tables, INNER)
    stage = _join_stage(plan)
    producers = plan.stage(stage.inputs[0].producer).task_count
    # partition 0 holds as much as the seven others together: two tasks, one of it alone
    left = [[70, 10, 10, 10, 10, 10, 10, 10]] * producers
    config = DistributedConfig(adaptive_one_task_bytes=0, adaptive_task_bytes=70 * producers, skew_factor=100)
    empty = [[0] * 8] * plan.stage(stage.inputs[1].producer).task_count
    new, decision = _adapted(plan, stage, _results(plan, stage, {0: left, 1: empty}), config)
    assert decision.tasks == 2
    assert [t.input_partitions[0] for t in new.stage(stage.id).tasks] == [(0,), (1, 2, 3, 4, 5, 6, 7)]


def test_as_many_tasks_as_planned_is_the_plan_as_it_was(tables) -> None:
    plan = _plan(tables, INNER)
    stage = _join_stage(plan)
    config = DistributedConfig(adaptive_one_task_bytes=0, adaptive_task_bytes=1)
    new, decision = _adapted(plan, stage, _results(plan, stage, {}), config)
    assert decision is None and new is plan


def test_a_skewed_partition_gets_tasks_reading_some_producers_each(tables) -> None:
    plan = _plan(tables, INNER)
    stage = _join_stage(plan)
    producers = plan.stage(stage.inputs[1].producer).task_count
    hot = [[10, 10, 10, 400, 10, 10, 10, 10]] * producers
    # the hot partition asks for a task per 400 bytes: one per producer, at most one per worker
    config = DistributedConfig(adaptive_one_task_bytes=0, adaptive_task_bytes=400, skew_min_bytes=100)
    new, decision = _adapted(plan, stage, _results(plan, stage, {1: hot}), config)
    tasks = new.stage(stage.id).tasks
    shares = [t for t in tasks if t.input_producers]
    assert decision.split == ((3, len(shares)),) and len(shares) == min(producers, 4)
    for share in shares:
        assert share.input_partitions == ((3,), (3,))
        assert share.input_producers[0] is None  # the other side's partition, whole
    assert sorted(p for s in shares for p in s.input_producers[1]) == list(range(producers))
    rest = [t for t in tasks if not t.input_producers]
    assert sorted(q for t in rest for q in t.input_partitions[0]) == [0, 1, 2, 4, 5, 6, 7]


def test_a_full_join_never_splits_a_partition(tables) -> None:
    plan = _plan(tables, "SELECT a.k, b.k FROM a FULL JOIN b ON a.k = b.k")
    stage = _join_stage(plan)
    assert stage.skew_inputs == ()
    producers = plan.stage(stage.inputs[1].producer).task_count
    hot = [[10, 10, 10, 400, 10, 10, 10, 10]] * producers
    config = DistributedConfig(adaptive_one_task_bytes=0, adaptive_task_bytes=1000, skew_min_bytes=100)
    request = adapt_request(plan, stage, _results(plan, stage, {1: hot}), config.planner(4))
    assert set(request.max_shares) == {1}
    assert InputSizeAdaptation().adapt_stage(request).split == ()


def test_the_last_steps_stage_folds_into_the_head(tables) -> None:
    plan = _plan(tables, "SELECT v, count(*) AS n FROM a GROUP BY v ORDER BY v")
    final = plan.final
    (stage,) = [plan.stage(i.producer) for i in final.inputs]
    results = {
        i.producer: [Result([Part(1, 10)] * i.partitions)] * plan.stage(i.producer).task_count
        for i in stage.inputs
    }
    results[stage.id] = []
    new, decision = _adapted(plan, stage, results, DistributedConfig())
    assert decision.folded_into == final.id and decision.tasks == 0
    assert [s.id for s in new.stages] == [s.id for s in plan.stages if s.id != stage.id]
    head = new.final
    assert [i.producer for i in head.inputs] == [i.producer for i in stage.inputs]
    assert not any(i.split for i in head.inputs)
    assert stage.plan in head.plan and stage.plan in head.tasks[0].plan


def test_a_handler_cannot_split_what_cannot_be_split(tables) -> None:
    plan = _plan(tables, INNER)
    stage = _join_stage(plan)
    request = adapt_request(plan, stage, _results(plan, stage, {}), DistributedConfig().planner(4))

    class TooMany:
        def adapt_stage(self, request):
            return Adaptation(tasks=1, split=((0, 99),))

    with pytest.raises(ValueError, match="TooMany.adapt_stage split partition 0"):
        HandlerChain([TooMany()]).adapt_stage(request)


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=40), st.integers(1, 50))
def test_balanced_runs_cut_every_item_once_in_order(weights: list[int], runs: int) -> None:
    items = list(range(100, 100 + len(weights)))
    cut = balanced_runs(items, weights, runs)
    assert [x for run in cut for x in run] == items
    assert len(cut) == min(runs, len(items)) and all(cut)


@pytest.mark.parametrize(
    ("rows", "size", "switched"),
    [
        (1000, 1 << 20, True),
        (1000, 64 << 20, True),
        (1000, (64 << 20) + 1, False),
        (1_048_577, 1 << 20, False),
    ],
)
def test_by_default_a_build_side_is_collected_while_every_copy_fits_the_budget(
    tables, rows: int, size: int, switched: bool
) -> None:
    """On 2 workers the default budget (128 MiB, 4 M rows at most, 64 bytes a row) allows
    64 MiB and 1048576 rows per copy."""
    plan = _plan(tables, INNER)
    stage = _join_stage(plan)
    request = AdaptRequest(stage, (), (), 0, (), False, DistributedConfig().planner(2), (rows, size))
    assert InputSizeAdaptation().adapt_stage(request).broadcast is switched


@pytest.mark.parametrize(
    ("others", "shared"),
    [
        (10, True),  # the rest is light: the shares, each rebuilding the other side, end sooner
        (300, False),  # the rest already fills the workers: the rebuilt sides would only add to them
    ],
)
def test_a_skewed_partition_is_shared_only_when_the_busiest_worker_gets_less(tables, others, shared) -> None:
    plan = _plan(tables, INNER)
    stage = _join_stage(plan)
    left_producers = plan.stage(stage.inputs[0].producer).task_count
    right_producers = plan.stage(stage.inputs[1].producer).task_count
    build = [[others] * 3 + [50] + [others] * 4] * left_producers
    hot = [[others] * 3 + [400] + [others] * 4] * right_producers
    config = DistributedConfig(
        adaptive_one_task_bytes=0, adaptive_task_bytes=1, skew_factor=1.0, skew_min_bytes=0
    )
    _, decision = _adapted(plan, stage, _results(plan, stage, {0: build, 1: hot}), config)
    assert bool(decision is not None and decision.split) is shared
