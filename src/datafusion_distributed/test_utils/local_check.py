"""Plan a query distributed, run its stages in this process and compare with single-node DataFusion.

The helpers follow the rules a distributed plan needs:

* the context plans with the settings of ``QueryPlanConfig.datafusion_settings``
  (``target_partitions = workers * partitions_per_task``, and the hash join thresholds of a
  broadcast unless ``broadcast_total_rows`` is None);
* the physical plan comes from a fresh DataFrame that was never executed (executing fills in
  dynamic filters, which would then be serialised as if they were static);
* the single-node answer comes from another fresh DataFrame of the same SQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from datafusion import SessionConfig, SessionContext

from ..distributed_planner.config import QueryPlanConfig
from ..distributed_planner.planner import plan_stages
from ..execution_plans.plan_node import PlanNode
from ..execution_plans.stage import DistributedPlan
from .compare import assert_tables_equal
from .distribution import assert_ran_distributed, assert_ran_on_one_node
from .local_runner import LocalStageRunner

__all__ = [
    "assert_distributed_matches",
    "exchange_nodes",
    "plan_distributed",
    "planning_context",
    "planning_session_config",
    "run_distributed",
]

# Nodes that become network boundaries when a plan is cut into stages.
EXCHANGE_NODES = ("CoalescePartitionsExec", "SortPreservingMergeExec")


def planning_session_config(config: QueryPlanConfig) -> SessionConfig:
    """The SessionConfig a distributed query is planned with: DataFusion's defaults with the
    settings of `config` applied, as DistributedContext applies them to the user's session."""
    session = SessionConfig()
    for name, value in config.datafusion_settings().items():
        session = session.set(name, value)
    return session


def planning_context(
    config: QueryPlanConfig, register: Callable[[SessionContext], None] | None = None
) -> SessionContext:
    """A SessionContext for planning with `config`, with tables registered by `register`."""
    ctx = SessionContext(planning_session_config(config))
    if register is not None:
        register(ctx)
    return ctx


def plan_distributed(ctx: SessionContext, sql: str, config: QueryPlanConfig) -> DistributedPlan:
    """Cut the physical plan of `sql` (from a fresh DataFrame) into stages."""
    return plan_stages(ctx.sql(sql).execution_plan(), config)


def _as_table(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    if not batches:
        return schema.empty_table()
    if all(b.schema == batches[0].schema for b in batches):
        return pa.Table.from_batches(batches)
    # Batches of one result may differ in nullability or decimal precision: unify them, by
    # position, since a result may repeat a column name.
    names = batches[0].schema.names
    positional = [f"c{i}" for i in range(len(names))]
    tables = [pa.Table.from_batches([b.rename_columns(positional)]) for b in batches]
    return pa.concat_tables(tables, promote_options="permissive").rename_columns(names)


def run_distributed(plan: DistributedPlan, schema: pa.Schema | None = None, timeout: float = 300) -> pa.Table:
    """Run every stage in this process; `schema` names the columns of an empty result.

    The run happens in a daemon thread so that a plan that never finishes (a stream blocked
    inside DataFusion cannot be interrupted) fails the caller after `timeout` seconds instead
    of hanging it; the stuck thread is abandoned.
    """
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["batches"] = LocalStageRunner().collect(plan)
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="local-stage-runner", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"the distributed run did not finish within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return _as_table(outcome["batches"], schema or pa.schema([]))


def exchange_nodes(root: PlanNode) -> list[str]:
    """The nodes of a single-node plan that a distributed plan turns into boundaries."""
    found = []
    for node in root.walk():
        hash_repartition = node.name == "RepartitionExec" and "partitioning=Hash(" in node.line
        if hash_repartition or (node.name in EXCHANGE_NODES and node.children):
            found.append(node.line)
    return found


def assert_distributed_matches(
    ctx: SessionContext, sql: str, config: QueryPlanConfig, timeout: float = 300, **compare: Any
) -> tuple[DistributedPlan, pa.Table]:
    """Plan `sql` distributed, run it locally and assert it equals the single-node answer,
    and show how it ran (`assert_ran_distributed`, or `assert_ran_on_one_node` for a plan of
    one task).

    `ctx` must have been made by :func:`planning_context` (or with the same settings) for
    `config`. Extra keyword arguments go to :func:`assert_tables_equal`.
    """
    plan = plan_distributed(ctx, sql, config)
    if plan.is_distributed:  # shown either way: callers assert the shape they expect
        assert_ran_distributed(plan)
    else:
        assert_ran_on_one_node(plan)
    expected = ctx.sql(sql).to_arrow_table()
    actual = run_distributed(plan, expected.schema, timeout)
    assert_tables_equal(actual, expected, sql=sql, **compare)
    return plan, actual
