"""Pass 5 of planning: write each stage's plan bytes (boundaries replaced by input markers)
and each task's plan (its share of every split scan) and inputs (its share of every split
shuffle)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..codec import file_groups, restrict_file_groups, scan_kind
from ..codec.feed_scan import collected_feed_scan, is_plain_projection, projected_columns
from ..codec.fields import INPUT_MARKER
from ..codec.scan import filter_predicate
from ..codec.sink import file_sink
from ..codec.wire import encode_len_field
from ..execution_plans.plan_node import PlanNode, replace_nodes
from ..execution_plans.stage import (
    BoundaryKind,
    FeedScan,
    InputBoundary,
    ShippedTable,
    Stage,
    StageInput,
    TaskPlan,
)
from .boundaries import splits_write
from .broadcast import broadcast_join
from .fragments import Edge, Fragment, cut_edges, split_union_scans, stage_leaves, union_partitions
from .rounds import runs_in_rounds
from .skew import skew_inputs


def _pruning_predicate(root: PlanNode, scan: PlanNode) -> tuple[bytes | None, str]:
    """The predicate of the FilterExec right above the feed scan `scan` in the stage `root`,
    and its text as DataFusion shows it, when the scan only picks columns (the predicate's
    columns are then the scan's own): a Parquet scan of the feed's files can prune with it."""
    parent = next((n for n in root.walk() if any(child is scan for child in n.children)), None)
    if parent is None or parent.name != "FilterExec" or not is_plain_projection(scan.line):
        return None, ""
    predicate = filter_predicate(parent.raw)
    shown = parent.line.removeprefix("FilterExec: ").split(", projection=[")[0]
    return (predicate, shown) if predicate is not None else (None, "")


def _stage_nodes(root: PlanNode, cut_ids: set[int]):
    """The nodes left in a stage's plan bytes: the subtree minus cut boundaries' subtrees."""
    yield root
    for child in root.children:
        if id(child) not in cut_ids:
            yield from _stage_nodes(child, cut_ids)


def input_marker(producer: int) -> bytes:
    """The placeholder that stands for producer stage `producer` inside a consumer's plan."""
    return encode_len_field(INPUT_MARKER, f"datafusion-distributed input {producer}".encode())


def feed_marker(scan_id: int) -> bytes:
    """The placeholder that stands for feed scan `scan_id` inside a stage's plan."""
    return encode_len_field(INPUT_MARKER, f"datafusion-distributed feed {scan_id}".encode())


def _chunks(n: int, parts: int) -> list[list[int]]:
    """Split range(n) into `parts` contiguous chunks whose sizes differ by at most one."""
    return [list(range(n * k // parts, n * (k + 1) // parts)) for k in range(parts)]


@dataclass
class Built:
    """What `build_stages` makes: the stages, producers first, and the shipped tables, whose
    ids follow the stages' (`first_table`, the number of stages, is known before building)."""

    first_table: int
    stages: list[Stage] = field(default_factory=list)
    tables: int = 0
    feed_scans: int = 0  # feed scans given an id so far

    def table(self, fragment: Fragment) -> ShippedTable:
        """Give a shipped memory table its id."""
        fragment.stage_id = self.first_table + self.tables
        self.tables += 1
        scan = fragment.table
        assert scan is not None  # called for the fragments of shipped tables only
        return ShippedTable(
            fragment.stage_id, fragment.root.raw, fragment.path, scan.rows, scan.data_bytes, scan.partitions
        )


def build_stages(fragment: Fragment, built: Built) -> None:
    """Add the stages of `fragment` and of the fragments it reads to `built`, producers first."""
    cut = cut_edges(fragment)
    tables = {}
    for edge in cut:
        if edge.fragment.table is not None:
            tables[id(edge)] = built.table(edge.fragment)
        else:
            build_stages(edge.fragment, built)
    fragment.stage_id = len(built.stages)
    markers = {id(edge.node): input_marker(edge.fragment.stage_id) for edge in cut}
    feed_leaves = stage_leaves(fragment, "feeds")
    feeds = _feed_scans(fragment, feed_leaves, built, markers)  # their markers added to `markers`
    plan = replace_nodes(fragment.root.raw, list(fragment.root.walk()), markers)
    inputs, per_input_parts = _stage_inputs(fragment, cut, markers, tables)
    scans = _scan_shares(fragment)
    splits_leaves = fragment.tasks > 1 and any(
        not whole for _, whole in (*stage_leaves(fragment, "scans"), *feed_leaves)
    )
    boundaries = [edge.node for edge in cut]
    broadcast = broadcast_join(
        fragment.root,
        boundaries,
        inputs,
        markers,
        [edge.fragment.table is None and not stage_leaves(edge.fragment, "feeds") for edge in cut],
        shares_only_inputs=not splits_leaves and not feeds,
    )
    local_nodes = list(_stage_nodes(fragment.root, set(markers)))
    built.stages.append(
        Stage(
            id=fragment.stage_id,
            root=fragment.root,
            plan=plan,
            inputs=tuple(inputs),
            tasks=tuple(_task_plans(fragment.tasks, plan, local_nodes, scans, inputs, per_input_parts)),
            output=fragment.kind,
            reason=fragment.reason,
            sink=file_sink(fragment.root.raw) if splits_write(fragment.root, not fragment.path) else None,
            feeds=tuple(feeds),
            skew_inputs=skew_inputs(fragment.root, boundaries, inputs, splits_leaves),
            broadcast=broadcast,
        )
    )


def _feed_scans(
    fragment: Fragment, leaves: list[tuple[PlanNode, bool]], built: Built, markers: dict[int, bytes]
) -> list[FeedScan]:
    """The stage's feed scans, each given an id and a marker (added to `markers`)."""
    feeds = []
    for node, whole in leaves:
        scan_id, built.feed_scans = built.feed_scans, built.feed_scans + 1
        ref = collected_feed_scan(node.raw)
        # rounds: a stage's one feed scan of Parquet files, shared out, under nodes that keep
        # rows apart (a reader's units are read before the task's plan runs, all at once)
        rounds = (
            len(leaves) == 1
            and not whole
            and ref.parquet
            and runs_in_rounds(fragment.root, node, set(markers))
        )
        predicate, shown = _pruning_predicate(fragment.root, node) if ref.parquet else (None, "")
        feeds.append(
            FeedScan(
                marker=feed_marker(scan_id),
                scan=node.raw,
                feed_id=ref.feed_id,
                scan_id=scan_id,
                whole=whole,
                name=ref.name,
                partitions=ref.partitions,
                columns=projected_columns(node.line),
                plain=is_plain_projection(node.line),
                rounds=rounds,
                native=ref.parquet and (rounds or whole or fragment.tasks == 1),
                predicate=predicate,
                predicate_shown=shown,
            )
        )
        markers[id(node)] = feeds[-1].marker
    return feeds


def _stage_inputs(
    fragment: Fragment, cut: list[Edge], markers: dict[int, bytes], tables: dict[int, ShippedTable]
) -> tuple[list[StageInput], list[list[list[int]] | None]]:
    """The stage's inputs, one per cut edge, and each input's partitions per task (None for an
    input every task reads whole)."""
    inputs, per_input_parts = [], []
    for edge in cut:
        producer = edge.fragment
        assert producer.kind is not None  # only the final fragment has none, and it is no producer
        split = not edge.whole and fragment.tasks > 1
        whole_parts = {
            BoundaryKind.SHUFFLE: list(range(edge.node.partitions)),
            BoundaryKind.MEMORY: list(range(edge.node.partitions)),
            BoundaryKind.COALESCE: [0],
            BoundaryKind.MERGE: list(range(producer.tasks)),
        }[producer.kind]
        per_input_parts.append(_chunks(len(whole_parts), fragment.tasks) if split else None)
        inputs.append(
            StageInput(
                where=InputBoundary(
                    marker=markers[id(edge.node)],
                    kind=producer.kind,
                    boundary=edge.node.raw,
                    boundary_child=edge.node.children[0].raw if edge.node.children else b"",
                ),
                producer=producer.stage_id,
                partitions=len(whole_parts),
                split=split,
                table=tables.get(id(edge)),
                boundary_node=edge.node,
            )
        )
    return inputs, per_input_parts


_ScanShares = tuple[PlanNode, list, str, list[list[int]]]  # scan, file groups, kind, groups per task


def _scan_shares(fragment: Fragment) -> list[_ScanShares]:
    """Each scan's file groups, kind and the groups each task reads, decoded once for all the
    stage's tasks."""
    together = {id(scan): scan for scan in split_union_scans(fragment)} if fragment.tasks > 1 else {}
    groups_of = {id(scan): file_groups(scan.raw) for scan, _ in stage_leaves(fragment, "scans")}
    # the scans shared out together: their partitions with files, in order, chunked as one list
    listed = [(id(scan), g) for scan, g in union_partitions(list(together.values()))]
    chunks = [[listed[j] for j in chunk] for chunk in _chunks(len(listed), fragment.tasks)]
    scans = []
    for scan, whole in stage_leaves(fragment, "scans"):
        groups = groups_of[id(scan)]
        every = list(range(len(groups)))
        if id(scan) in together:
            shares = [[g for i, g in chunk if i == id(scan)] for chunk in chunks]
        elif whole or fragment.tasks == 1:
            shares = [every] * fragment.tasks
        else:
            shares = _chunks(len(groups), fragment.tasks)
        scans.append((scan, groups, scan_kind(scan.raw) or "", shares))  # collected as a scan: it has a kind
    return scans


def _task_plans(
    tasks: int,
    plan: bytes,
    local_nodes: list[PlanNode],
    scans: list[_ScanShares],
    inputs: list[StageInput],
    per_input_parts: list[list[list[int]] | None],
) -> list[TaskPlan]:
    """Each task's plan (its share of every split scan) and input partitions."""
    found = []
    for k in range(tasks):
        restricted, described = {}, []
        for scan, groups, kind, shares in scans:
            keep = shares[k]
            if len(keep) != len(groups):
                restricted[id(scan)] = restrict_file_groups(scan.raw, keep)
            described.append((kind, tuple(tuple(groups[i]) for i in keep)))
        parts = tuple(
            tuple(chunks[k]) if chunks else tuple(range(inp.partitions))
            for chunks, inp in zip(per_input_parts, inputs, strict=True)
        )
        found.append(TaskPlan(k, replace_nodes(plan, local_nodes, restricted), parts, tuple(described)))
    return found
