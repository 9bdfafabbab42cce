"""What a task runs in place of an input whose producers wrote no row at all.

With no file to read, the input's scan has no schema to read them with, so the consumer runs
the boundary subtree itself in the input's place. Run as planned, that subtree computes the
producers' work again (a filter that kept nothing over a large table scans it twice, the
second time in one task). It is run instead over leaves that read nothing and under a limit of
no row (`codec.no_rows`): the same schema and partitions, no row, almost no work. That needs
every leaf of the subtree to be a file scan, a memory scan, or a leaf that reads nothing from
outside the plan; otherwise (a generate_series, a feed, a leaf of a kind not known here) the
subtree runs as planned, as before.
"""

from __future__ import annotations

from dataclasses import replace

from ..codec import SpliceError, WireError, scan_kind
from ..codec import fields as F
from ..codec.children import kind
from ..codec.no_rows import memory_scan_without_rows, no_rows_of, scan_without_files
from ..execution_plans.plan_node import PlanNode, replace_nodes
from ..execution_plans.stage import InputBoundary, StageInput

# Leaves that read nothing and make at most a row: kept as they are.
SMALL_LEAVES = frozenset({"EmptyExec", "PlaceholderRowExec"})


def no_rows_stand_in(boundary: PlanNode) -> bytes | None:
    """The bytes of `boundary` (an input's boundary subtree) reading nothing, under a limit of
    no row; None when a leaf of it cannot be made to read nothing."""
    walk = list(boundary.walk())
    emptied = {}
    try:
        for node in walk:
            if node.children:
                continue
            if scan_kind(node.raw) is not None:
                emptied[id(node)] = scan_without_files(node.raw)
            elif kind(node.raw) == F.MEMORY_SCAN:
                emptied[id(node)] = memory_scan_without_rows(node.raw)
            elif node.name not in SMALL_LEAVES:
                return None
        return no_rows_of(replace_nodes(boundary.raw, walk, emptied))
    except (SpliceError, WireError):
        return None


def read_in_place_of_nothing(inp: StageInput) -> InputBoundary | None:
    """Where `inp` is read, with its boundary subtree reading nothing (`no_rows_stand_in`) to
    run in place of its empty exchange; None when that subtree must run as planned."""
    stand_in = no_rows_stand_in(inp.boundary_node) if inp.boundary_node is not None else None
    return None if stand_in is None else replace(inp.where, boundary=stand_in, boundary_child=b"")
