"""Pass 2 of planning: walk the plan from its root and cut it at each boundary (see
`boundaries`) into fragments; each memory table larger than `memory_table_inline_bytes`
becomes an input the coordinator ships once instead of data inside every task's plan."""

from __future__ import annotations

from ..codec import scan_kind
from ..codec.feed_scan import feed_scan_ref
from ..codec.memory import MemoryScan, memory_scan
from ..execution_plans.plan_node import PlanNode, whole_children
from ..execution_plans.stage import BoundaryKind
from .boundaries import boundary_kind, ordering_from_below, rebuilds_alone, split_hazard, splits_write
from .fragments import Edge, Fragment, row_by_row


def _shipped(node: PlanNode, ship_above: int | None) -> MemoryScan | None:
    """The memory table `node` scans, when it is large enough to be shipped once rather than
    travel inside plans. A scan declaring an ordering stays: a scan of files would not."""
    if ship_above is None or node.children or len(node.raw) <= ship_above:
        return None
    table = memory_scan(node.raw)
    if table is None or table.ordered or table.data_bytes <= ship_above:
        return None
    return table


def collect_fragments(
    fragment: Fragment,
    node: PlanNode,
    whole: bool,
    is_root: bool,
    keep_shuffles: bool = False,
    uses_subquery: bool = False,
    kept_by: str | None = None,
    path: tuple[int, ...] = (),
    ship_above: int | None = None,
    under_write: bool = False,
    under_union: bool = False,
) -> None:
    """Add what `node`, in `fragment`'s subtree, holds to `fragment`: scans, feeds, hazards
    that keep it whole, and an edge to a new fragment at each boundary (collected in turn).
    The flags carry what the nodes above decided: `whole` (every task reads all of it),
    `keep_shuffles`, `uses_subquery`, `kept_by` and `under_write` (exchanges that must stay),
    `under_union` (row by row below a union: its scans' partitions may be shared out together)."""
    table = _shipped(node, ship_above)
    if table is not None:
        shipped = Fragment(root=node, kind=BoundaryKind.MEMORY, table=table, path=path)
        shipped.reason = "written once by the coordinator"
        fragment.edges.append(Edge(node, shipped, whole))
        return
    kind = None if is_root else boundary_kind(node)
    if kind is BoundaryKind.COALESCE and under_write:
        # DataFusion gathers a write's rows into one partition for its sink; each task of a
        # split write gathers its own share instead, so the coalesce stays in the write's stage.
        kind = None
    if kind is not None and kept_by is not None:
        # A node above relies on what DataFusion knew of the rows here (see
        # `ordering_from_below`), which a cut would lose: the exchange stays inside the
        # stage, which must then see all rows.
        fragment.hazards.append(f"{kept_by}; the {node.name} below it stays in its stage")
        kind = None
    if kind is BoundaryKind.SHUFFLE and keep_shuffles:
        kind = None
    if kind is not None and uses_subquery and not rebuilds_alone(node):
        # The exchange stays inside the stage, which must then see all rows.
        fragment.hazards.append(f"{node.name} reads a scalar subquery's value computed above it")
        kind = None
    if kind is not None:
        producer = Fragment(root=node, kind=kind, path=path)
        collect_fragments(producer, node, whole=False, is_root=True, path=path, ship_above=ship_above)
        fragment.edges.append(Edge(node, producer, whole))
        return
    if not node.children and feed_scan_ref(node.raw) is not None:
        fragment.feeds.append((node, whole))
        return
    if scan_kind(node.raw) is not None:
        fragment.scans.append((node, whole))
        if under_union:
            fragment.union_scans.add(id(node))
        return
    if not node.children and not whole:
        fragment.hazards.append(f"{node.line.split(',')[0]} is a source that cannot be split")
    hazard = split_hazard(node, is_plan_root=not path)
    if hazard:
        fragment.hazards.append(hazard)
    # InterleaveExec checks, when rebuilt, that its children are hash partitioned alike; a
    # scan of exchange files declares no partitioning, so shuffles below it stay in place.
    keep_shuffles = keep_shuffles or node.name == "InterleaveExec"
    kept_by = kept_by or ordering_from_below(node)
    whole_idx = whole_children(node)
    for i, child in enumerate(node.children):
        collect_fragments(
            fragment,
            child,
            whole or i in whole_idx,
            is_root=False,
            keep_shuffles=keep_shuffles,
            uses_subquery=uses_subquery or (node.name == "ScalarSubqueryExec" and i == 0),
            kept_by=kept_by,
            path=(*path, i),
            ship_above=ship_above,
            under_write=splits_write(node, is_plan_root=not path),
            under_union=node.name == "UnionExec" or (under_union and row_by_row(node)),
        )
