"""Whether a query runs on one node, and why: decided from the structure of its plans.

Some statements must never be planned twice (DataFusion acts on them while planning), some
are over once planned, some writes cannot be staged, some scans read through an object store
only the user's context has, and a plan that did not travel must not read a work-unit feed.
Everything else is cut into stages by `plan_query`; a plan it keeps on one node runs what the
user's own context would run (a plan of one task that travels faithfully with its joins under
yield points, where that costs nothing: see `yield_points`), planned with the context's own
partitions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from datafusion import DataFrame, SessionContext
from datafusion.expr import DmlStatement, EmptyRelation
from datafusion.plan import ExecutionPlan, LogicalPlan

from ..codec import scan_kind
from ..codec.feed_scan import FEED_FILE_PREFIX
from ..codec.scan import object_store_url
from ..errors import QueryFailed, said_all
from ..execution_plans.object_stores import ObjectStores, bucket_of
from ..execution_plans.stage import DistributedPlan
from .planner import single_node_plan
from .yield_points import with_yield_points

ACTS_WHEN_PLANNED = "DELETE, UPDATE and TRUNCATE act on their table when DataFusion plans them: planned once"

RAN_WHEN_PLANNED = (
    "DataFusion ran this statement (CREATE TABLE [AS], CREATE VIEW, DROP, ...) in the coordinator "
    "when it was planned; nothing is left to run"
)

# DataFusion's write operations that insert rows: planned as plans of rows, and split into tasks
INSERTS = ("Append", "Overwrite", "Replace")

LOCAL_STORE = "file:///"  # the store of local files, which every session has


def ran_when_planned(logical: LogicalPlan) -> bool:
    """Whether `logical` is what DataFusion leaves of a DDL statement it ran while planning it
    (`SessionContext.sql` runs CREATE TABLE AS, CREATE VIEW, DROP, ... at once): an empty
    relation producing no row, which no query of rows plans as."""
    variant = logical.to_variant()
    return isinstance(variant, EmptyRelation) and not variant.produce_one_row()


def acts_when_planned(logical: LogicalPlan) -> bool:
    """Whether planning `logical` changes data: a memory table's DELETE, UPDATE and TRUNCATE
    happen in DataFusion's physical planner, so the query may be planned once only."""
    variant = logical.to_variant()
    if not isinstance(variant, DmlStatement):
        return False
    op = variant.op()  # a WriteOp, an enum datafusion.expr does not export
    return op not in [getattr(type(op), name) for name in INSERTS]


def unstaged_write(plan: DistributedPlan, stores: ObjectStores) -> str:
    """Why the write `plan` splits over tasks cannot be staged and committed ("" if it can):
    a write into a bucket needs its S3Store, to reach the bucket from the coordinator."""
    bucket = bucket_of(plan.write.destination) if plan.write is not None else None
    if bucket is None or any(store.bucket == bucket for store in stores):
        return ""
    return (
        f"DataSinkExec writes to s3://{bucket}, whose store was not registered with "
        "DistributedContext.register_object_store (an S3Store): written from one node"
    )


def unreachable_store(plan: DistributedPlan, stores: ObjectStores, session_hook: bool) -> str:
    """Why the tasks of `plan` could not read what its scans read ("" if they can): a scan of
    an object store other than local files and the `stores` registered with the library reads
    through a store registered only on the user's SessionContext (DataFusion's store objects
    cannot be read back to send them), unless a session hook may register it in the sessions
    tasks run in (`session_hook`: the context has one)."""
    if session_hook:
        return ""
    sent = {store.url for store in stores}
    for node in plan.final.root.walk():  # the final stage's root is the whole plan's
        if scan_kind(node.raw) is None:
            continue
        url = object_store_url(node.raw)
        if url == LOCAL_STORE or url.rstrip("/") in sent:
            continue
        return (
            f"{node.name} reads {url[:200]}, whose object store is registered only on the "
            "SessionContext (not with DistributedContext.register_object_store and an S3Store, "
            "nor by a session hook): the workers cannot read it"
        )
    return ""


def check_feed_reads(plan: DistributedPlan) -> None:
    """Refuse a plan that would read a work-unit feed's table from DataFusion's own plan: its
    units are read only by plans that travel as bytes, so it would read no row."""
    shown = plan.physical.display_indent() if plan.in_memory and plan.physical is not None else ""
    if FEED_FILE_PREFIX in shown.split("\n", 1)[0] and shown.startswith("DataSinkExec"):
        raise QueryFailed(
            "a work-unit feed table cannot be written to (INSERT INTO): its rows are its units', "
            "read when a query runs"
        )
    if FEED_FILE_PREFIX in shown:
        raise QueryFailed(
            "the query reads a work-unit feed table but must run on one node from DataFusion's "
            f"own plan ({plan.single_node or plan.final.reason}); a feed's units are read only "
            "by plans that travel as bytes, so it would read no row"
        )


def choose_plan(
    df: DataFrame,
    ctx: SessionContext,
    cut: Callable[[LogicalPlan], DistributedPlan],
    stores: ObjectStores,
    session_hook: bool = False,
    workers_unfit: str = "",
    prune: Callable[[ExecutionPlan], tuple[ExecutionPlan, tuple[str, ...]]] = lambda plan: (plan, ()),
) -> DistributedPlan:
    """The plan `df` (a DataFrame of the user's context `ctx`) runs as: `cut(logical plan)`, the
    plan cut into stages, unless the query must stay on one node; then DataFusion's own plan
    of it in `ctx`, with the reason. `stores` travel with the tasks; `session_hook`: the
    sessions tasks run in are built by the user's hook, which may register other stores;
    `workers_unfit`: why the workers cannot decode task plans ("" if they can); `prune`: the
    plan a query of one task runs here without the files statistics rule out, and what they
    were (see `file_pruning.pruned_plan`)."""
    logical = df.logical_plan()
    try:
        if acts_when_planned(logical):
            plan = single_node_plan(df.execution_plan(), ctx, ACTS_WHEN_PLANNED)
        elif ran_when_planned(logical):
            plan = single_node_plan(df.execution_plan(), ctx, RAN_WHEN_PLANNED)
        else:
            plan = cut(logical)
            from_bytes = bool(not plan.in_memory or plan.feeds)  # run in sessions other than `ctx`
            here = unstaged_write(plan, stores) or (
                (workers_unfit or unreachable_store(plan, stores, session_hook)) if from_bytes else ""
            )
            if here:
                plan = single_node_plan(df.execution_plan(), ctx, here)
            elif plan.feeds and plan.in_memory:
                # one task, run here; from its bytes, so that it reads the feed's units
                plan = dataclasses.replace(plan, physical=None, session=None)
            elif plan.in_memory:
                # Run what the user's own context runs: planned with their settings (partitions,
                # memory limit), showing their information_schema; or, planned already with
                # their partitions, the plan as `cut` made it (see `small_plans`).
                kept = plan.physical if plan.session is ctx else None
                physical, pruned = prune(kept if kept is not None else df.execution_plan())
                plan = single_node_plan(physical, ctx, plan.single_node, plan.final.reason)
                if (
                    not plan.single_node and plan.physical is not None
                ):  # one task, not kept for travelling unfaithfully
                    physical = with_yield_points(plan.physical, ctx, logical)
                    plan = dataclasses.replace(plan, physical=physical, pruned=pruned)
    except Exception as exc:  # DataFusion raises plain Exception
        raise QueryFailed.of(exc) from (None if said_all(exc) else exc)
    check_feed_reads(plan)
    return plan
