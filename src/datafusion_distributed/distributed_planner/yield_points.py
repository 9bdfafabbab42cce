"""Yield points over the joins of a plan that runs in the coordinator from memory.

A join may emit millions of rows within one poll and never yield (apache/datafusion#19358),
so dropping a cancelled query's stream leaves DataFusion's tokio tasks working until the join
next yields: seconds, or minutes. Tasks run from bytes put each join under a CooperativeExec
(`runtime.task_plan`); DataFusion's in-memory plan cannot be edited, only rebuilt from its
bytes. That rebuild is done only where it costs next to nothing and changes nothing:

- the plan has a join (most one-task plans have none to stop);
- no hash join pushes a dynamic filter into a scan: the bytes drop it, and a short query would
  read the rows it skips (most TPC-H queries have one);
- no scan reads a memory table: its bytes would hold the table's rows;
- the plan travels faithfully (`fidelity`), as a distributed plan must.

Everything else runs from DataFusion's own plan, as the user's context would run it.
"""

from __future__ import annotations

import logging

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan, LogicalPlan

from ..codec.cooperative import wrap_cooperative
from ..runtime.task_plan import is_join
from .fidelity import travel_blocker
from .series_repair import as_sent

log = logging.getLogger(__name__)

DYNAMIC_FILTER = "DynamicFilter"  # a scan's predicate a hash join fills in while it runs
MEMORY_SCAN = "partition_sizes="  # how DataFusion shows a scan of a memory table


def worth_rebuilding(shown: str) -> bool:
    """Whether a plan displayed as `shown` has a join and loses nothing costly in its bytes."""
    return "JoinExec" in shown and DYNAMIC_FILTER not in shown and MEMORY_SCAN not in shown


def with_yield_points(plan: ExecutionPlan, session: SessionContext, logical: LogicalPlan) -> ExecutionPlan:
    """`plan` (planned in `session` from `logical`) rebuilt from its bytes with each join under
    a yield point when that is cheap and faithful (see the module's docstring); else `plan`."""
    if not worth_rebuilding(plan.display_indent()):
        return plan
    try:
        root = as_sent(plan)  # repaired as a distributed plan's bytes are
        blocker = travel_blocker(plan, root, session, logical.display_indent_schema())
        if blocker is not None:
            log.debug("running a plan of one task without yield points: %s", blocker)
            return plan
        joins = [node.raw for node in root.walk() if is_join(node.name)]
        return ExecutionPlan.from_bytes(session, wrap_cooperative(root.raw, joins))
    except Exception as exc:  # DataFusion raises plain Exception; the plan still runs as it is
        log.debug("running a plan of one task without yield points: %s", exc)
        return plan
