"""Cut a DataFusion physical plan into a DAG of stages and give each stage its tasks.

`plan_query` first drops from each scan the files a lakehouse table's statistics prove its
predicate cannot match (`file_pruning`), then runs the passes in order, each in a module of
its own:

1. `series_repair`: repair the bytes DataFusion serialises wrongly.
2. `cut_boundaries`: walk the plan from the root; each boundary (see `boundaries`) starts a
   producer fragment, and each memory table larger than `memory_table_inline_bytes` becomes an
   input the coordinator ships once (`ShippedTable`) instead of data inside every task's plan.
3. `task_counts`: give each fragment a task count: from scanned bytes at leaves, from input
   stages above them, capped by the workers and by the partitions a stage can split; 1 if
   anything in it forbids splitting.
4. `fold_boundaries`: fold back boundaries not worth an exchange: producer and consumer both
   of one task, or a small join build side that every task of its consumer can compute itself.
5. `build_stages`: write each stage's plan bytes (boundaries replaced by input markers) and
   each task's plan (its share of every split scan) and inputs (its share of every split
   shuffle).
6. `fidelity`: check that the stages travel faithfully; a plan that would not runs on one node,
   with a note saying why.

The fragments the passes fill in are those of `fragments`.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..events.chain import HandlerChain
from ..execution_plans.plan_node import PlanNode
from ..execution_plans.stage import DistributedPlan, Stage, TaskPlan
from .build_stages import Built, build_stages
from .config import QueryPlanConfig
from .cut_boundaries import collect_fragments
from .fidelity import travel_blocker, unserialisable
from .file_pruning import TableStatistics, prune_files
from .fold_boundaries import fold_boundaries
from .fragments import Fragment, count_stages
from .series_repair import with_series_repaired
from .task_counts import assign_task_counts

log = logging.getLogger("datafusion_distributed.planner")


def plan_stages(
    plan: ExecutionPlan | PlanNode, config: QueryPlanConfig, handlers: HandlerChain | None = None
) -> DistributedPlan:
    """Cut a physical plan into stages of tasks, pass by pass (see the module docstring);
    `handlers` may choose task counts (see `events`)."""
    node = plan if isinstance(plan, PlanNode) else PlanNode.from_plan(plan)
    # 1. repair the bytes DataFusion serialises wrongly: every stage is cut from these
    root = with_series_repaired(node)
    # 2. cut at boundaries; the root itself may be one (a final sort-preserving merge): then
    #    the final stage is just that merge over its producers' outputs
    final = Fragment(root=root, kind=None)
    collect_fragments(final, root, whole=False, is_root=False, ship_above=config.memory_table_inline_bytes)
    # 3. give each fragment its tasks
    assign_task_counts(final, config, HandlerChain.of(handlers))
    # 4. fold back the boundaries not worth an exchange
    fold_boundaries(final, config)
    # 5. write the stages' and tasks' plan bytes
    built = Built(first_table=count_stages(final))
    build_stages(final, built)
    stages = built.stages
    if len(stages) == 1 and stages[0].task_count == 1 and stages[0].sink is not None:
        # one task in the coordinator: DataFusion writes to the destination itself, unstaged
        stages = [replace(stages[0], sink=None)]
    return DistributedPlan(tuple(stages))


def plan_query(
    plan: ExecutionPlan,
    session: SessionContext,
    config: QueryPlanConfig,
    handlers: HandlerChain | None = None,
    logical_plan_text: str = "",
    worker_session: SessionContext | None = None,
    file_statistics: TableStatistics | None = None,
) -> DistributedPlan:
    """Cut `plan`, planned in `session`, into stages, or keep it on one node when it cannot
    travel faithfully as bytes to workers decoding it in sessions like `worker_session` (see
    `fidelity`; `logical_plan_text` is the query's logical plan with its schemas). Scans of
    the files of `file_statistics` are pruned with them. Either way the result keeps the
    in-memory plan, which a plan of one task runs from (see `file_pruning.pruned_plan`)."""
    codecs = session if session.physical_extension_codec_ids() else None  # the user's extensions'
    try:
        root = PlanNode.from_plan(plan, ctx=codecs)
    except Exception:  # DataFusion raises plain Exception
        return _kept_on_one_node(plan, session, unserialisable(plan, codecs))
    pruned_root, pruned = prune_files(root, file_statistics)
    stages = plan_stages(pruned_root, config, handlers)  # passes 1 to 5
    stages = replace(stages, pruned=tuple(p.describe() for p in pruned))
    # 6. check that the stages' bytes decode, in a worker's session, to the plan they came from
    if stages.is_distributed:
        blocker = travel_blocker(plan, root, session, logical_plan_text, worker_session)
        if blocker is not None:
            return _kept_on_one_node(plan, session, blocker)
    return replace(stages, physical=plan, session=session)


def _kept_on_one_node(plan: ExecutionPlan, session: SessionContext, reason: str) -> DistributedPlan:
    log.info("running on one node: %s", reason)
    return single_node_plan(plan, session, reason)


def single_node_plan(
    plan: ExecutionPlan, session: SessionContext, reason: str = "", tasks: str = ""
) -> DistributedPlan:
    """`plan` as one task run in the coordinator from memory, in `session`. `reason` says why
    a plan that could be split is not ("" for a plan of one task anyway, whose `tasks` line
    says why it has one)."""
    why = f"runs on one node: {reason}" if reason else tasks
    stage = Stage(0, PlanNode.describe(plan), b"", (), (TaskPlan(0, b"", (), ()),), None, why)
    return DistributedPlan((stage,), physical=plan, session=session, single_node=reason)


def single_task(stage: Stage) -> TaskPlan:
    """The stage as one task over everything: used when a split input turned out empty."""
    parts = tuple(tuple(range(inp.partitions)) for inp in stage.inputs)
    return TaskPlan(0, stage.plan, parts, ())
