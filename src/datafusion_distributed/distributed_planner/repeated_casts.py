"""Take out of a decoded plan's display the projections DataFusion adds that change nothing.

DataFusion 55 decodes a UnionExec's input whose projection ends in casts (the union's type
coercion) with one more ProjectionExec above it, casting each such column again to the type
it already has: `CAST(c0@0 AS Int64) as c0` over `CAST(... AS Int64) as c0`. The decoded plan
computes the same rows; without this, the round-trip check (`fidelity`) would keep every such
union on one node.
"""

from __future__ import annotations

import re

from ..common.display_lists import bracketed_list

# one output column of a projection: input column n, under its own name, maybe cast
_PASSED_ON = re.compile(
    r"^(?:CAST\((?P<cast_name>\w+)@(?P<cast_index>\d+) AS (?P<type>.+)\)|(?P<name>\w+)@(?P<index>\d+))"
    r" as (?P<alias>\w+)$"
)
# nodes that keep their input's columns as they are, in order
_SAME_COLUMNS = (
    "RepartitionExec:",
    "CoalesceBatchesExec:",
    "CoalescePartitionsExec",
    "SortExec:",
    "CooperativeExec",
)


def _projection(line: str) -> list[str] | None:
    """The expressions of a ProjectionExec, or of a scan's `projection=[...]`."""
    body = line.strip()
    if body.startswith("ProjectionExec: "):
        return bracketed_list(body, "expr=[")
    if body.startswith("DataSourceExec: "):
        return bracketed_list(body, ", projection=[")
    return None


def _cast_type(expr: str) -> str | None:
    """The type `expr` casts to when it is one CAST(... AS type) as a whole, else None."""
    if not expr.startswith("CAST(") or not expr.endswith(")"):
        return None
    depth = 0
    for position in range(len("CAST"), len(expr)):
        depth += expr[position] == "("
        depth -= expr[position] == ")"
        if depth == 0 and position != len(expr) - 1:
            return None  # the first CAST closes before the end: CAST(a) + ...
    body = expr[len("CAST(") : -1]
    return body.rsplit(" AS ", 1)[1] if " AS " in body else None


def _repeats_casts(lines: list[str], at: int) -> bool:
    """Whether line `at` is a projection passing each column of its input on (its input's
    n-th column as the n-th, same name), cast, if at all, to the type the input's own
    projection already cast that column to."""
    exprs = _projection(lines[at])
    if not exprs or at + 1 >= len(lines):
        return False
    below = at + 1
    while lines[below].strip().startswith(_SAME_COLUMNS) and below + 1 < len(lines):
        below += 1
    inner = _projection(lines[below])
    if inner is None or len(inner) != len(exprs):
        return False
    for position, (expr, source) in enumerate(zip(exprs, inner, strict=True)):
        match = _PASSED_ON.match(expr)
        if match is None:
            return False
        name, index = match["cast_name"] or match["name"], int(match["cast_index"] or match["index"])
        if name != match["alias"] or index != position or not source.endswith(f" as {name}"):
            return False
        if match["type"] is not None and _cast_type(source.removesuffix(f" as {name}")) != match["type"]:
            return False
    return True


def without_repeated_casts(lines: list[str]) -> list[str]:
    """`lines` (a plan's display, two spaces a level) without the projections that only
    repeat their input's casts, their subtrees moved up a level."""
    out, index = [], 0
    while index < len(lines):
        if not _repeats_casts(lines, index):
            out.append(lines[index])
            index += 1
            continue
        indent = len(lines[index]) - len(lines[index].lstrip())
        index += 1
        while index < len(lines) and len(lines[index]) - len(lines[index].lstrip()) > indent:
            out.append(lines[index][2:])
            index += 1
    return without_repeated_casts(out) if len(out) < len(lines) else out
