"""A snapshot of a DataFusion physical plan: names, partition counts and bytes of every node."""

from __future__ import annotations

from dataclasses import dataclass

from datafusion.plan import ExecutionPlan


@dataclass(frozen=True)
class PlanNode:
    """One node of a physical plan, with its serialised subtree and its children."""

    name: str
    line: str
    partitions: int
    raw: bytes
    children: tuple[PlanNode, ...]

    @classmethod
    def from_plan(cls, plan: ExecutionPlan) -> PlanNode:
        line = plan.display().split("\n", 1)[0].strip()
        return cls(
            name=line.split(":", 1)[0].strip(),
            line=line,
            partitions=plan.partition_count,
            raw=plan.to_bytes(),
            children=tuple(cls.from_plan(child) for child in plan.children()),
        )

    def walk(self):
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
