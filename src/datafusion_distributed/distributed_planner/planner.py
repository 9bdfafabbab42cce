"""Cut a DataFusion physical plan into a DAG of stages and give each stage its tasks.

1. Walk the plan from the root; each boundary (see `boundaries`) starts a producer stage, and
   each memory table larger than `memory_table_inline_bytes` becomes an input the coordinator
   ships once (`ShippedTable`) instead of data inside every task's plan.
2. Give each stage a task count: from scanned bytes at leaves, from input stages above them,
   capped by the workers and by the partitions a stage can split; 1 if anything in it forbids
   splitting.
3. Fold back boundaries not worth an exchange: producer and consumer both of one task, or a
   small join build side that every task of its consumer can compute itself.
4. Write each stage's plan bytes (boundaries replaced by input markers) and each task's plan
   (its share of every split scan) and inputs (its share of every split shuffle).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import file_groups, restrict_file_groups, scan_kind
from ..codec.feed_scan import feed_scan_ref, is_plain_projection, projected_columns
from ..codec.fields import INPUT_MARKER
from ..codec.generate_series import repaired_series
from ..codec.memory import MemoryScan, memory_scan
from ..codec.scan import filter_predicate
from ..codec.sink import file_sink
from ..codec.wire import encode_len_field
from ..events.chain import HandlerChain
from ..events.handlers import TaskCountRequest
from ..execution_plans.plan_node import PlanNode, replace_nodes, whole_children
from ..execution_plans.stage import (
    BoundaryKind,
    DistributedPlan,
    FeedScan,
    InputBoundary,
    ShippedTable,
    Stage,
    StageInput,
    TaskPlan,
)
from .boundaries import (
    boundary_kind,
    ordering_from_below,
    rebuilds_alone,
    split_hazard,
    splits_write,
)
from .broadcast import broadcast_join
from .config import QueryPlanConfig
from .fidelity import travel_blocker, unserialisable
from .rounds import runs_in_rounds
from .scan_size import scanned_bytes
from .skew import skew_inputs

log = logging.getLogger("datafusion_distributed.planner")


@dataclass(eq=False)
class _Edge:
    node: PlanNode  # the boundary node in the consumer's subtree
    fragment: _Fragment
    whole: bool  # every consumer task reads all of it (a join's collected side)
    inline: bool = False  # folded back into the consumer (a 1 -> 1 boundary)


@dataclass(eq=False)
class _Fragment:
    root: PlanNode
    kind: BoundaryKind | None
    edges: list[_Edge] = field(default_factory=list)
    scans: list[tuple[PlanNode, bool]] = field(default_factory=list)  # (scan, whole)
    feeds: list[tuple[PlanNode, bool]] = field(default_factory=list)  # (work-unit feed scan, whole)
    hazards: list[str] = field(default_factory=list)
    tasks: int = 1
    reason: str = ""
    reads_leaves: bool = False  # splits scans or feeds of its own (see `_fold_boundaries`)
    stage_id: int = -1
    table: MemoryScan | None = None  # a memory table the coordinator ships: no stage of its own
    path: tuple[int, ...] = ()  # child indices from the plan's root to `root`


def _shipped(node: PlanNode, ship_above: int | None) -> MemoryScan | None:
    """The memory table `node` scans, when it is large enough to be shipped once rather than
    travel inside plans. A scan declaring an ordering stays: a scan of files would not."""
    if ship_above is None or node.children or len(node.raw) <= ship_above:
        return None
    table = memory_scan(node.raw)
    if table is None or table.ordered or table.data_bytes <= ship_above:
        return None
    return table


def _collect(
    fragment: _Fragment,
    node: PlanNode,
    whole: bool,
    is_root: bool,
    keep_shuffles: bool = False,
    uses_subquery: bool = False,
    kept_by: str | None = None,
    path: tuple[int, ...] = (),
    ship_above: int | None = None,
    under_write: bool = False,
) -> None:
    table = _shipped(node, ship_above)
    if table is not None:
        shipped = _Fragment(root=node, kind=BoundaryKind.MEMORY, table=table, path=path)
        shipped.reason = "written once by the coordinator"
        fragment.edges.append(_Edge(node, shipped, whole))
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
        child = _Fragment(root=node, kind=kind, path=path)
        _collect(child, node, whole=False, is_root=True, path=path, ship_above=ship_above)
        fragment.edges.append(_Edge(node, child, whole))
        return
    if not node.children and feed_scan_ref(node.raw) is not None:
        fragment.feeds.append((node, whole))
        return
    if scan_kind(node.raw) is not None:
        fragment.scans.append((node, whole))
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
        _collect(
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
        )


def _edge_units(edge: _Edge) -> int:
    """Partitions of an input that tasks can share out."""
    if edge.fragment.kind in (BoundaryKind.SHUFFLE, BoundaryKind.MEMORY):
        return edge.node.partitions
    return 1  # a coalesce or merge yields one partition in the consumer


def _assign_task_counts(fragment: _Fragment, config: QueryPlanConfig, handlers: HandlerChain) -> None:
    if fragment.table is not None:
        return  # written by the coordinator, not run as tasks
    for edge in fragment.edges:
        _assign_task_counts(edge.fragment, config, handlers)
    split_scans = [scan for scan, whole in fragment.scans if not whole]
    split_edges = [edge for edge in fragment.edges if not edge.whole]
    # a feed scan's partitions are shared out like a file scan's; its units go to whichever
    # of those partitions asks first
    split_feeds = [feed for feed, whole in fragment.feeds if not whole]
    feed_tasks = tuple(feed_scan_ref(feed.raw).tasks for feed in split_feeds)
    units = [scan.partitions for scan in split_scans] + [_edge_units(e) for e in split_edges]
    units += [feed.partitions for feed in split_feeds]
    if fragment.hazards:
        fragment.tasks, fragment.reason = 1, fragment.hazards[0]
        return
    if not units:
        fragment.tasks, fragment.reason = 1, "nothing to split: every input is read whole"
        return
    shuffles = [e.fragment.tasks for e in split_edges if e.fragment.kind is BoundaryKind.SHUFFLE]
    # a shipped memory table is read like a scan: its bytes count toward the stage's size
    tables = sum(e.fragment.table.data_bytes for e in split_edges if e.fragment.table is not None)
    request = TaskCountRequest(
        fragment.root,
        sum(scanned_bytes(s) for s in split_scans) + tables,
        tuple(shuffles),
        min(units),
        config.workers,
        config,
        feed_tasks,
    )
    count, handler = handlers.task_count(request)  # events.defaults.ScanSizeTaskCount unless a user answers
    fragment.reads_leaves = bool(split_scans or split_feeds)  # sized by its own scans, not inputs
    cap = config.task_cap if count.maximum is None else count.maximum
    fragment.tasks = max(1, min(count.desired, cap, min(units)))
    desired = f"{count.desired} ({count.why})" if count.why else count.desired
    limits = {"desired": desired, "workers/cap": cap, "splittable partitions": min(units)}
    fragment.reason = ", ".join(f"{k}={v}" for k, v in limits.items())
    if handler in handlers.user:
        fragment.reason += f" (by {type(handler).__name__})"


def _fold_boundaries(fragment: _Fragment, config: QueryPlanConfig) -> None:
    """Fold back boundaries not worth an exchange.

    - 1 -> 1: producer and consumer both run as one task.
    - small broadcasts into a split consumer: a join's collected side that reads only small
      scans (no other stage) is computed whole by every consumer task, which costs less than a
      stage and an exchange. A single-task consumer keeps the stage: its producer runs in
      parallel there.
    """
    for edge in fragment.edges:
        if edge.fragment.table is not None:
            continue  # folding it back would put the table in the plan again
        _fold_boundaries(edge.fragment, config)
        if edge.fragment.tasks == 1 and fragment.tasks == 1:
            edge.inline = True
            if not fragment.reads_leaves and edge.fragment.reads_leaves:
                # one stage now: its one task is the folded producer's, for the producer's reason
                fragment.reason, fragment.reads_leaves = edge.fragment.reason, True
        elif (
            edge.whole
            and fragment.tasks > 1
            and all(e.fragment.table for e in _cut_edges(edge.fragment))
            and not _stage_leaves(edge.fragment, "feeds")  # each consumer task would read every unit
        ):
            scanned = sum(scanned_bytes(scan) for scan, _ in _stage_leaves(edge.fragment, "scans"))
            edge.inline = scanned <= config.broadcast_inline_bytes


def _cut_edges(fragment: _Fragment) -> list[_Edge]:
    """Boundaries that stay cut in this stage, looking through folded ones. What a folded
    boundary's producer read is read whole when the consumer reads that boundary whole (a
    join's collected side folded back reads all of its inputs in every task)."""
    cut = []
    for edge in fragment.edges:
        if not edge.inline:
            cut.append(edge)
            continue
        inner = _cut_edges(edge.fragment)
        cut.extend(replace(e, whole=True) if edge.whole and not e.whole else e for e in inner)
    return cut


def _stage_leaves(fragment: _Fragment, kind: str) -> list[tuple[PlanNode, bool]]:
    """The fragment's leaves of `kind` ("scans" or "feeds"), looking through folded edges,
    each with whether the stage reads it whole."""
    leaves = list(getattr(fragment, kind))
    for edge in fragment.edges:
        if edge.inline:
            leaves.extend((leaf, whole or edge.whole) for leaf, whole in _stage_leaves(edge.fragment, kind))
    return leaves


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


def _with_series_repaired(root: PlanNode) -> PlanNode:
    """`root` with the bytes of every series generator DataFusion serialises wrongly repaired
    (see `codec.generate_series`), and so those of its ancestors: every stage, task and
    boundary subtree is cut from these bytes, so all of them rebuild as planned."""
    repairs: dict[int, bytes] = {}
    for node in root.walk():
        fixed = None if node.children else repaired_series(node.raw)
        if fixed is not None:
            repairs[id(node)] = fixed
    if not repairs:
        return root

    def rebuild(node: PlanNode) -> PlanNode:
        if id(node) in repairs:
            return replace(node, raw=repairs[id(node)])
        children = tuple(rebuild(child) for child in node.children)
        if all(new is old for new, old in zip(children, node.children, strict=True)):
            return node
        return replace(node, raw=replace_nodes(node.raw, list(node.walk()), repairs), children=children)

    return rebuild(root)


def as_sent(plan: ExecutionPlan) -> PlanNode:
    """`plan` as the planner cuts stages from it: its bytes repaired where DataFusion
    serialises them wrongly."""
    return _with_series_repaired(PlanNode.from_plan(plan))


def bytes_as_sent(plan: ExecutionPlan) -> bytes:
    """The bytes of `plan` as the planner cuts stages from them (repairs included)."""
    return as_sent(plan).raw


def input_marker(producer: int) -> bytes:
    """The placeholder that stands for producer stage `producer` inside a consumer's plan."""
    return encode_len_field(INPUT_MARKER, f"datafusion-distributed input {producer}".encode())


def feed_marker(scan_id: int) -> bytes:
    """The placeholder that stands for feed scan `scan_id` inside a stage's plan."""
    return encode_len_field(INPUT_MARKER, f"datafusion-distributed feed {scan_id}".encode())


def _chunks(n: int, parts: int) -> list[list[int]]:
    """Split range(n) into `parts` contiguous chunks whose sizes differ by at most one."""
    return [list(range(n * k // parts, n * (k + 1) // parts)) for k in range(parts)]


def _count_stages(fragment: _Fragment) -> int:
    """The stages `fragment` and the fragments it reads become (shipped tables are none)."""
    return 1 + sum(_count_stages(e.fragment) for e in _cut_edges(fragment) if e.fragment.table is None)


@dataclass
class _Built:
    """What `_build_stages` makes: the stages, producers first, and the shipped tables, whose
    ids follow the stages' (`first_table`, the number of stages, is known before building)."""

    first_table: int
    stages: list[Stage] = field(default_factory=list)
    tables: int = 0
    feed_scans: int = 0  # feed scans given an id so far

    def table(self, fragment: _Fragment) -> ShippedTable:
        """Give a shipped memory table its id."""
        fragment.stage_id = self.first_table + self.tables
        self.tables += 1
        scan = fragment.table
        return ShippedTable(
            fragment.stage_id, fragment.root.raw, fragment.path, scan.rows, scan.data_bytes, scan.partitions
        )


def _build_stages(fragment: _Fragment, built: _Built) -> None:
    stages = built.stages
    cut = _cut_edges(fragment)
    tables = {}
    for edge in cut:
        if edge.fragment.table is not None:
            tables[id(edge)] = built.table(edge.fragment)
        else:
            _build_stages(edge.fragment, built)
    fragment.stage_id = len(stages)
    markers = {id(edge.node): input_marker(edge.fragment.stage_id) for edge in cut}
    feeds = []
    feed_leaves = _stage_leaves(fragment, "feeds")
    for node, whole in feed_leaves:
        scan_id, built.feed_scans = built.feed_scans, built.feed_scans + 1
        ref = feed_scan_ref(node.raw)
        # rounds: a stage's one feed scan of Parquet files, shared out, under nodes that keep
        # rows apart (a reader's units are read before the task's plan runs, all at once)
        rounds = (
            len(feed_leaves) == 1
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
    plan = replace_nodes(fragment.root.raw, list(fragment.root.walk()), markers)
    local_nodes = list(_stage_nodes(fragment.root, set(markers)))
    inputs, per_input_parts = [], []
    for edge in cut:
        producer = edge.fragment
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
    # Each scan's files, kind and share per task, decoded once for all the stage's tasks.
    scans = []
    for scan, whole in _stage_leaves(fragment, "scans"):
        groups = file_groups(scan.raw)
        every = list(range(len(groups)))
        shares = (
            [every] * fragment.tasks if whole or fragment.tasks == 1 else _chunks(len(groups), fragment.tasks)
        )
        scans.append((scan, groups, scan_kind(scan.raw), shares))
    splits_leaves = fragment.tasks > 1 and any(
        not whole for _, whole in (*_stage_leaves(fragment, "scans"), *feed_leaves)
    )
    boundaries = [edge.node for edge in cut]
    skewable = skew_inputs(fragment.root, boundaries, inputs, splits_leaves)
    broadcast = broadcast_join(
        fragment.root,
        boundaries,
        inputs,
        markers,
        [edge.fragment.table is None and not _stage_leaves(edge.fragment, "feeds") for edge in cut],
        shares_only_inputs=not splits_leaves and not feeds,
    )
    tasks = []
    for k in range(fragment.tasks):
        restricted, described = {}, []
        for scan, groups, kind, shares in scans:
            keep = shares[k]
            if len(keep) != len(groups):
                restricted[id(scan)] = restrict_file_groups(scan.raw, keep)
            described.append((kind, tuple(tuple(groups[i]) for i in keep)))
        task_plan = replace_nodes(plan, local_nodes, restricted)
        parts = tuple(
            tuple(chunks[k]) if chunks else tuple(range(inp.partitions))
            for chunks, inp in zip(per_input_parts, inputs, strict=True)
        )
        tasks.append(TaskPlan(k, task_plan, parts, tuple(described)))
    stages.append(
        Stage(
            id=fragment.stage_id,
            root=fragment.root,
            plan=plan,
            inputs=tuple(inputs),
            tasks=tuple(tasks),
            output=fragment.kind,
            reason=fragment.reason,
            sink=file_sink(fragment.root.raw) if splits_write(fragment.root, not fragment.path) else None,
            feeds=tuple(feeds),
            skew_inputs=skewable,
            broadcast=broadcast,
        )
    )


def plan_stages(
    plan: ExecutionPlan | PlanNode, config: QueryPlanConfig, handlers: HandlerChain | None = None
) -> DistributedPlan:
    """Cut a physical plan into stages of tasks (see the module docstring); `handlers` may
    choose task counts (see `events`)."""
    root = _with_series_repaired(plan if isinstance(plan, PlanNode) else PlanNode.from_plan(plan))
    final = _Fragment(root=root, kind=None)
    # The root itself may be a boundary (a final sort-preserving merge): then the final stage
    # is just that merge over its producers' outputs.
    _collect(final, root, whole=False, is_root=False, ship_above=config.memory_table_inline_bytes)
    _assign_task_counts(final, config, HandlerChain.of(handlers))
    _fold_boundaries(final, config)
    built = _Built(first_table=_count_stages(final))
    _build_stages(final, built)
    stages = built.stages
    if len(stages) == 1 and stages[0].task_count == 1 and stages[0].sink is not None:
        # one task in the coordinator: DataFusion writes to the destination itself, unstaged
        stages = [replace(stages[0], sink=None)]
    return DistributedPlan(tuple(stages))


def plan_query(
    plan: ExecutionPlan,
    session: SessionContext,
    config: QueryPlanConfig,
    handlers: HandlerChain | None = None,
    logical_plan_text: str = "",
    worker_session: SessionContext | None = None,
) -> DistributedPlan:
    """Cut `plan`, planned in `session`, into stages, or keep it on one node when it cannot
    travel faithfully as bytes to workers decoding it in sessions like `worker_session` (see
    `fidelity`; `logical_plan_text` is the query's logical plan with its schemas). Either way
    the result keeps the in-memory plan, which a plan of one task runs from."""
    try:
        root = PlanNode.from_plan(plan)
    except Exception:  # DataFusion raises plain Exception
        return _kept_on_one_node(plan, session, unserialisable(plan))
    stages = plan_stages(root, config, handlers)
    if stages.is_distributed:
        blocker = travel_blocker(plan, root, session, logical_plan_text, worker_session)
        if blocker is not None:
            return _kept_on_one_node(plan, session, blocker)
    return replace(stages, physical=plan, session=session)


def _kept_on_one_node(plan: ExecutionPlan, session: SessionContext, reason: str) -> DistributedPlan:
    log.info("running on one node: %s", reason)
    return single_node_plan(plan, session, reason)


def single_node_plan(
    plan: ExecutionPlan, session: SessionContext, reason: str = "", tasks: str = ""
) -> DistributedPlan:
    """`plan` as one task run in the coordinator from memory, in `session`. `reason` says why
    a plan that could be split is not ("" for a plan of one task anyway, whose `tasks` line
    says why it has one)."""
    why = f"runs on one node: {reason}" if reason else tasks
    stage = Stage(0, PlanNode.describe(plan), b"", (), (TaskPlan(0, b"", (), ()),), None, why)
    return DistributedPlan((stage,), physical=plan, session=session, single_node=reason)


def single_task(stage: Stage) -> TaskPlan:
    """The stage as one task over everything: used when a split input turned out empty."""
    parts = tuple(tuple(range(inp.partitions)) for inp in stage.inputs)
    return TaskPlan(0, stage.plan, parts, ())
