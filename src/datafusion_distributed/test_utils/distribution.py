"""Show how an answer was made: the check beside every comparison with single-node.

A test that says a distributed answer equals single-node DataFusion proves nothing if the
query quietly ran on one node, or if both sides came from DataFusion. So each such test also
calls :func:`assert_ran_distributed` (the query ran as several tasks) or, where running on one
node is the behaviour under test, :func:`assert_ran_on_one_node`. The test suite counts both
kinds of call (:data:`LEDGER`) and fails a test that compares answers without showing how its
query ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..execution_plans.stage import DistributedPlan
    from ..metrics.query_metrics import QueryMetrics

__all__ = [
    "LEDGER",
    "assert_share_ran_distributed",
    "assert_ran_distributed",
    "assert_ran_on_one_node",
    "tasks_run",
]


@dataclass
class Ledger:
    """How many answers were compared, and how many times a test showed how a query ran."""

    compared: int = 0
    shown: int = 0


LEDGER = Ledger()


def _last_query(dctx: Any) -> dict[int, int]:
    """Tasks per stage of the last query `dctx`, a DistributedContext, ran (its history)."""

    def tasks(records: list) -> dict[int, int]:
        if not records:
            raise AssertionError("the context has run no query")
        keys = {(stage, task) for stage, task, _ in records[-1].attempts}
        return {stage: sum(1 for s, _ in keys if s == stage) for stage, _ in keys}

    return dctx.engine.history.read(tasks)


def _metrics_or_plan(source: Any) -> QueryMetrics | DistributedPlan:
    """The run's metrics of a distributed data frame (after it ran), else `source` itself."""
    from .. import DistributedDataFrame

    if isinstance(source, DistributedDataFrame):
        if source.metrics is None:
            raise AssertionError("the data frame has not run yet: collect it before asking how it ran")
        return source.metrics
    return source


def tasks_run(source: Any) -> dict[int, int]:
    """Tasks per stage of a query: as it ran (a DistributedDataFrame after a run, or its
    QueryMetrics; a DistributedContext: the last query it ran), or as planned (a
    DistributedPlan, for plans run by the test runners)."""
    from .. import DistributedContext

    if isinstance(source, DistributedContext):
        return _last_query(source)
    found = _metrics_or_plan(source)
    if isinstance(found.stages, dict):  # QueryMetrics
        return {stage: len(metrics.tasks) for stage, metrics in found.stages.items()}
    return {stage.id: stage.task_count for stage in found.stages}


def assert_ran_distributed(source: Any) -> None:
    """Assert the query of `source` (see `tasks_run`) ran as several tasks (those of its stages
    together), not on one node."""
    LEDGER.shown += 1
    counts = tasks_run(source)
    note = getattr(source, "single_node", "")
    if isinstance(note, str) and note:
        raise AssertionError(f"the query ran on one node: {note}")
    if sum(counts.values()) < 2:
        raise AssertionError(f"the query did not run distributed: tasks per stage {counts}")


def assert_ran_on_one_node(source: Any) -> None:
    """Assert the query of `source` (see `tasks_run`) ran as one task, in the coordinator."""
    LEDGER.shown += 1
    counts = tasks_run(source)
    if sum(counts.values()) != 1:
        raise AssertionError(f"the query ran distributed: tasks per stage {counts}")


def assert_share_ran_distributed(distributed: int, queries: int, share: float = 0.5) -> None:
    """Assert that more than `share` of a run of many `queries` (a generated set, a corpus) ran
    as several tasks: `distributed` of them did, as the run's report counts them."""
    LEDGER.shown += 1
    if distributed <= queries * share:
        raise AssertionError(
            f"only {distributed} of {queries} queries ran distributed (wanted over {share:.0%})"
        )
