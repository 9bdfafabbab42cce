"""A snapshot of a DataFusion physical plan: names, partition counts and bytes of every node."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import children as layouts
from ..codec import replace_subtree

# (node kind, number of children) -> where the children lie in the node's bytes; None for a
# kind whose children cannot be cut out (they are serialised one by one instead).
_LAYOUTS: dict[tuple[int | None, int], layouts.Layout | None] = {}


@dataclass(frozen=True)
class PlanNode:
    """One node of a physical plan, with its serialised subtree and its children."""

    name: str
    line: str
    partitions: int
    raw: bytes
    children: tuple[PlanNode, ...]

    @classmethod
    def from_plan(
        cls, plan: ExecutionPlan, raw: bytes | None = None, ctx: SessionContext | None = None
    ) -> PlanNode:
        """Snapshot `plan`; `raw` is its bytes when already known. The plan is serialised once:
        each child's bytes are cut out of its parent's (serialised with `ctx`'s codecs where
        they must be: a plan holding nodes of an extension codec)."""
        line = _first_line(plan)
        raw = _serialised(plan, ctx) if raw is None else raw
        children = plan.children()
        return cls(
            name=_name(line),
            line=line,
            partitions=plan.partition_count,
            raw=raw,
            children=tuple(
                cls.from_plan(child, child_raw, ctx)
                for child, child_raw in zip(children, _children_bytes(raw, children, ctx), strict=True)
            ),
        )

    @classmethod
    def describe(cls, plan: ExecutionPlan) -> PlanNode:
        """Snapshot `plan` for display only, without serialising it (its bytes are empty): for
        a plan that runs on one node from memory, possibly one DataFusion cannot serialise."""
        line = _first_line(plan)
        return cls(
            name=_name(line),
            line=line,
            partitions=plan.partition_count,
            raw=b"",
            children=tuple(cls.describe(child) for child in plan.children()),
        )

    def walk(self) -> Iterator[PlanNode]:
        """Every node of the subtree, depth first, parents before children."""
        yield self
        for child in self.children:
            yield from child.walk()

    def attribute(self, key: str) -> str | None:
        """The value of `key=` in the node's display line (e.g. join_type), if present."""
        marker = f"{key}="
        pos = self.line.find(marker)
        if pos < 0:
            return None
        rest = self.line[pos + len(marker) :]
        end = len(rest)
        for stop in (",", " "):
            i = rest.find(stop)
            if i >= 0:
                end = min(end, i)
        return rest[:end]


def replace_nodes(plan: bytes, walk: list[PlanNode], replacements: dict[int, bytes]) -> bytes:
    """Replace nodes (keyed by id) of `plan`, whose nodes in byte order are `walk`.

    Identical subtrees are told apart by occurrence; replacing the last one first keeps the
    occurrence numbers of the others valid.
    """
    seen: dict[bytes, int] = {}
    targets = []
    for node in walk:
        occurrence = seen.get(node.raw, 0)
        seen[node.raw] = occurrence + 1
        if id(node) in replacements:
            targets.append((node, occurrence))
    for node, occurrence in reversed(targets):
        plan = replace_subtree(plan, node.raw, replacements[id(node)], occurrence)
    return plan


def replace_leaves(root: PlanNode, replacements: dict[int, bytes]) -> PlanNode:
    """`root` with the bytes of the leaves keyed (by id) in `replacements` replaced, and so
    those of their ancestors; the nodes' names, lines and partition counts are kept."""
    if not replacements:
        return root

    def rebuild(node: PlanNode) -> PlanNode:
        if id(node) in replacements:
            return replace(node, raw=replacements[id(node)])
        children = tuple(rebuild(child) for child in node.children)
        if all(new is old for new, old in zip(children, node.children, strict=True)):
            return node
        return replace(node, raw=replace_nodes(node.raw, list(node.walk()), replacements), children=children)

    return rebuild(root)


def collects_left(node: PlanNode) -> bool:
    """Whether `node` is a join that collects its left (build) child whole before it reads
    the right one: a CollectLeft hash join, a nested loop join or a cross join."""
    if node.name == "HashJoinExec":
        return node.attribute("mode") == "CollectLeft"
    return node.name in ("NestedLoopJoinExec", "CrossJoinExec")


def whole_children(node: PlanNode) -> set[int]:
    """Children every task must read in full: the collected (build) side of a join, and the
    subqueries of a ScalarSubqueryExec (child 0 is its input; the others compute the values)."""
    if node.name == "ScalarSubqueryExec":
        return set(range(1, len(node.children)))
    return {0} if collects_left(node) else set()


def _first_line(plan: ExecutionPlan) -> str:
    return plan.display().split("\n", 1)[0].strip()


def _name(line: str) -> str:
    return line.split(":", 1)[0].strip()


def _serialised(plan: ExecutionPlan, ctx: SessionContext | None) -> bytes:
    """`plan`'s bytes, with the codecs of `ctx` when given."""
    return plan.to_bytes() if ctx is None else plan.to_bytes(ctx)


def _children_bytes(
    raw: bytes, children: list[ExecutionPlan], ctx: SessionContext | None = None
) -> list[bytes]:
    """The children's serialised bytes: read out of `raw` when their layout is known,
    otherwise serialised (and the layout learned from them for the next node of the kind)."""
    if not children:
        return []
    key = (layouts.kind(raw), len(children))
    layout = _LAYOUTS.get(key, ())
    if layout:
        found = layouts.read(raw, layout)
        if found is not None:
            return found
    serialised = [_serialised(child, ctx) for child in children]
    if key not in _LAYOUTS:
        _LAYOUTS[key] = layouts.learn(raw, serialised)
    return serialised
