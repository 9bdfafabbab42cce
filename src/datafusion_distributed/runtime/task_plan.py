"""A task's plan, rebuilt from its bytes with its inputs spliced in and a yield point over each join
(see `interruption` for why)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import replace_subtree
from ..codec.cooperative import wrap_cooperative
from ..execution_plans.plan_node import PlanNode
from .inputs import ResolvedInput, input_leaf
from .streams import Attempt, sink_plan, with_exchange_codec

log = logging.getLogger(__name__)


class TaskError(RuntimeError):
    """A task failed while building or running its plan."""


def prepare_task_plan(
    ctx: SessionContext,
    plan: bytes,
    inputs: list[ResolvedInput],
    leaves: Sequence[tuple[bytes, bytes]] = (),
    stream_to: Attempt | None = None,
) -> ExecutionPlan:
    """Splice every input into a task's plan bytes and deserialise it, each join under a
    yield point (see the module's docstring). `leaves` are other (marker, plan bytes) pairs to
    splice in: the scans of the work-unit feeds the task read. With `stream_to` the plan runs
    under a sink streaming its outputs as attempt `stream_to` (see `streams`)."""
    for resolved in inputs:
        plan = replace_subtree(plan, resolved.where.marker, input_leaf(resolved))
    for marker, leaf in leaves:
        plan = replace_subtree(plan, marker, leaf)
    if stream_to is not None:
        plan = sink_plan(plan, stream_to)
    streamed = stream_to is not None or any(resolved.streams for resolved in inputs)
    decoder = with_exchange_codec(ctx) if streamed else ctx  # the data plane's nodes need its codec
    built = _decoded(decoder, plan)
    raw = _with_yield_points(built, plan, decoder)
    return built if raw is plan else _decoded(decoder, raw)


def _decoded(ctx: SessionContext, plan: bytes) -> ExecutionPlan:
    """The plan of the bytes `plan`, or TaskError saying why it cannot be built."""
    try:
        return ExecutionPlan.from_bytes(ctx, plan)
    except Exception as exc:  # DataFusion raises plain Exception
        raise TaskError(f"could not rebuild the task's plan: {exc}") from exc


def _with_yield_points(built: ExecutionPlan, raw: bytes, ctx: SessionContext) -> bytes:
    """The plan bytes `raw` (deserialised as `built` in `ctx`) with each join under a CooperativeExec;
    `raw` itself when it has no join, or when that fails (it then stops only when its joins
    yield)."""
    if "JoinExec" not in built.display_indent():  # most plans: nothing to walk
        return raw
    try:
        joins = [node.raw for node in PlanNode.from_plan(built, raw, ctx).walk() if is_join(node.name)]
        return wrap_cooperative(raw, joins) if joins else raw
    except Exception as exc:  # unreadable bytes
        log.warning("running a task without yield points over its joins: %s", exc)
        return raw


YIELD_POINT = "CooperativeExec"


def is_join(name: str) -> bool:
    """Whether a plan node of this name is a join (hash, merge, nested loop, cross, ...)."""
    return name.endswith("JoinExec")


def added_yield_point(plan: ExecutionPlan, line: str) -> ExecutionPlan | None:
    """The join below `plan` when `plan` (whose first display line is `line`) is a yield point
    `prepare_task_plan` added, else None. DataFusion puts its own CooperativeExec only over
    leaves and exchanges, never right over a join, so metrics can skip exactly the added ones."""
    if line != YIELD_POINT:
        return None
    children = plan.children()
    if len(children) == 1 and is_join(children[0].display().split("\n", 1)[0].split(":", 1)[0].strip()):
        return children[0]
    return None
