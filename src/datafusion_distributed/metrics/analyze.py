"""EXPLAIN and EXPLAIN ANALYZE output: a distributed plan, with what its run measured if given,
as text, Graphviz DOT or Mermaid."""

from __future__ import annotations

from ..execution_plans.display import display_distributed_plan
from ..execution_plans.stage import DistributedPlan
from .explain import explain_analyze, to_graphviz, to_mermaid
from .query_metrics import QueryMetrics

FORMATS = ("text", "graphviz", "mermaid")


def check_explain_format(format: str) -> None:
    """Raise ValueError unless `format` is one of `FORMATS`."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")


def render_explain(
    plan: DistributedPlan, metrics: QueryMetrics | None = None, verbose: bool = False, format: str = "text"
) -> str:
    """`plan` in `format`; with `metrics` (of a run of the plan), what the run measured too,
    on the plan as it ran (re-planned from its stages' sizes when the query was adaptive)."""
    check_explain_format(format)
    if metrics is not None and metrics.plan_as_run is not None:
        plan = metrics.plan_as_run
    if format == "graphviz":
        return to_graphviz(plan, metrics)
    if format == "mermaid":
        return to_mermaid(plan, metrics)
    if metrics is None:
        return display_distributed_plan(plan)
    return explain_analyze(plan, metrics, verbose)
