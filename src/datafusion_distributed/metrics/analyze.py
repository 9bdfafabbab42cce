"""EXPLAIN and EXPLAIN ANALYZE for distributed frames: run the query when metrics are asked
for, then render the plan as text, Graphviz DOT or Mermaid."""

from __future__ import annotations

import re
from typing import Any

from ..execution_plans.display import display_distributed_plan
from .explain import explain_analyze, to_graphviz, to_mermaid

FORMATS = ("text", "graphviz", "mermaid")

_EXPLAIN_ANALYZE = re.compile(r"^\s*explain\s+analyze\s+(?:(verbose)\s+)?(.*)$", re.IGNORECASE | re.DOTALL)


def split_explain_analyze(query: str) -> tuple[str, bool] | None:
    """(the query, verbose) if `query` is `EXPLAIN ANALYZE [VERBOSE] <query>`, else None."""
    match = _EXPLAIN_ANALYZE.match(query)
    if match is None:
        return None
    return match.group(2), match.group(1) is not None


def explain(ddf: Any, analyze: bool = False, verbose: bool = False, format: str = "text") -> str:
    """The distributed plan of `ddf` (a DistributedDataFrame) in `format`; with `analyze`, the
    query runs first (its result is discarded) and the plan shows what it measured."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    plan = ddf.distributed_plan()
    metrics = None
    if analyze:
        for _ in ddf._execute_plan(plan):
            pass
        metrics = ddf.metrics
    if format == "graphviz":
        return to_graphviz(plan, metrics)
    if format == "mermaid":
        return to_mermaid(plan, metrics)
    if metrics is None:
        return display_distributed_plan(plan)
    return explain_analyze(plan, metrics, verbose)
