"""What a run measured, looked up for each part of the distributed plan and formatted: the
text of EXPLAIN ANALYZE and the notes on a drawn stage DAG (the renderers live beside the plan,
in `execution_plans`; this module only supplies their annotations).

A node's metrics are found by its path in the stage: the executed plan is the stage's plan with
each input boundary replaced by a scan of the exchanged files (for a coalesce or merge, the
boundary node over that scan), so down to its inputs it has the stage plan's shape, and the path
of child indices that leads to a node in the stage leads to its metrics in the executed plan.
"""

from __future__ import annotations

from ..common.units import format_bytes
from ..execution_plans.display import Annotations, NodePath, display_distributed_plan
from ..execution_plans.graph import GraphAnnotations, render_graphviz, render_mermaid
from ..execution_plans.plan_node import PlanNode
from ..execution_plans.stage import DistributedPlan, Stage, StageInput
from .query_metrics import QueryMetrics, StageMetrics, TaskReport
from .task_metrics import NodeMetrics

# Metrics shown on every node; verbose shows all of them.
SUMMARY = ("output_rows", "elapsed_compute", "spill_count", "spilled_bytes", "spilled_rows")
_ALWAYS = ("output_rows", "elapsed_compute")


def format_seconds(s: float) -> str:
    """`s` seconds in s, ms or µs, with two decimals."""
    if s >= 1:
        return f"{s:.2f}s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f}ms"
    return f"{s * 1e6:.2f}µs"


def format_value(name: str, value: int) -> str:
    """A DataFusion metric's value as shown: times (recorded in nanoseconds) in seconds, byte
    counts in bytes, anything else as the number."""
    if name == "elapsed_compute" or name.endswith("_time") or "time_" in name or name.endswith("_ns"):
        return format_seconds(value / 1e9)
    if name.endswith("bytes"):
        return format_bytes(value)
    return str(value)


def executed_node(
    stage: Stage, path: NodePath, executed: NodeMetrics | None, at_input: bool = False
) -> NodeMetrics | None:
    """The node of the executed plan `executed` at `path` in `stage`, or None where the executed
    plan differs from the stage's plan on the way there (no numbers rather than wrong ones): a
    node of another name, or another number of children. `at_input` says the path ends at an
    input boundary, where the executed plan legitimately holds the scan of the input instead."""
    node, metrics = stage.root, executed
    for index in path:
        if metrics is None or metrics.name != node.name or len(metrics.children) != len(node.children):
            return None
        node, metrics = node.children[index], metrics.children[index]
    if metrics is None or (metrics.name != node.name and not at_input):
        return None
    return metrics


class MetricsAnnotations(Annotations, GraphAnnotations):
    """What a run measured, for the text display and the DAG drawings: each stage's totals,
    each node's metrics summed over the stage's tasks, and each input's reads; `verbose` adds
    every metric, each task's line and per-task row counts to the text."""

    def __init__(self, metrics: QueryMetrics, verbose: bool = False) -> None:
        self.metrics = metrics
        self.verbose = verbose
        self._merged: dict[int, NodeMetrics | None] = {}  # per stage: its tasks' plans summed

    def _executed(self, stage: Stage) -> NodeMetrics | None:
        if stage.id not in self._merged:
            sm = self.metrics.stage(stage.id)
            self._merged[stage.id] = sm.plan if sm is not None else None
        return self._merged[stage.id]

    def header(self, stage: Stage) -> list[str]:
        """The stage's totals, and with `verbose` a line per task."""
        folded = [
            f"adaptive: stage {d.stage} {d.describe()}"
            for d in self.metrics.adaptations
            if d.folded_into == stage.id
        ]
        sm = self.metrics.stage(stage.id)
        if sm is None:
            return [*folded, "metrics: (stage did not run)"]
        lines = [*folded, f"metrics: {_stage_summary(sm, stage.id in self.metrics.streamed_stages)}"]
        units = self.metrics.feed_units.get(stage.id)
        if units:
            per_task = " ".join(f"{units.get(t, 0)}" for t in range(max(units) + 1))
            lines.append(f"feed units per task: [{per_task}] ({sum(units.values())} in all)")
        if self.verbose:
            lines.extend(_task_line(t) for t in sorted(sm.tasks, key=lambda t: t.task))
        return lines

    def node(self, stage: Stage, path: NodePath, node: PlanNode, reads: StageInput | None) -> str:
        """The node's metrics summed over the stage's tasks (all of them with `verbose`, and
        the rows of each task)."""
        sm = self.metrics.stage(stage.id)
        at_input = reads is not None
        metrics = executed_node(stage, path, self._executed(stage), at_input) if sm is not None else None
        if metrics is None or sm is None:
            return ""
        names = [n for n in SUMMARY if n in metrics.values]
        if self.verbose:
            names += [n for n in metrics.values if n not in SUMMARY]
        shown = [n for n in names if n in _ALWAYS or metrics.values[n] != 0 or self.verbose]
        parts = [f"{n}={format_value(n, metrics.values[n])}" for n in shown]
        if self.verbose and len(sm.tasks) > 1 and "output_rows" in metrics.values:
            per_task = [
                executed_node(stage, path, t.metrics.plan if t.metrics else None, at_input) for t in sm.tasks
            ]
            rows = " ".join(str(m.get("output_rows")) if m else "?" for m in per_task)
            parts.insert(1, f"output_rows per task=[{rows}]")
        return f"metrics=[{', '.join(parts)}]"

    def input(self, stage: Stage, path: NodePath, stage_input: StageInput) -> str:
        """What the stage read of the input: rows, bytes, and what came over the network."""
        sm = self.metrics.stage(stage.id)
        if sm is None:
            return ""
        index = stage.inputs.index(stage_input)
        totals = sm.input_totals(index)
        scan = executed_node(stage, path, self._executed(stage), at_input=True)
        if scan is not None and stage_input.where.runs_boundary:
            scan = scan.children[0] if scan.children else None  # the scan below the boundary node
        parts = []
        if scan is not None and "output_rows" in scan.values:
            parts.append(f"rows={scan.values['output_rows']}")
        parts.append(f"read={format_bytes(totals.bytes)}")
        parts.append(f"fetched={format_bytes(totals.fetched_bytes)} in {totals.files} file(s)")
        if totals.fetched_bytes:
            parts.append(f"fetch_time={format_seconds(totals.fetch_seconds)}")
        return f"metrics=[{', '.join(parts)}]"

    def stage_note(self, stage: Stage) -> str:
        """The stage's rows and time."""
        sm = self.metrics.stage(stage.id)
        return f"{sm.rows} rows, {format_seconds(sm.seconds)}" if sm is not None else ""

    def task_count(self, stage: Stage) -> int:
        """The tasks that ran, when the stage ran."""
        sm = self.metrics.stage(stage.id)
        return len(sm.tasks) if sm is not None and sm.tasks else stage.task_count

    def task_note(self, stage: Stage, task: int) -> list[str]:
        """Where the task ran, its rows and its time."""
        sm = self.metrics.stage(stage.id)
        report = next((t for t in sm.tasks if t.task == task), None) if sm is not None else None
        if report is None:
            return []
        return [report.worker, f"{report.rows} rows, {format_seconds(report.wall_seconds)}"]

    def edge_note(self, stage: Stage, index: int) -> str:
        """The bytes the stage read of input `index`."""
        sm = self.metrics.stage(stage.id)
        return format_bytes(sm.input_totals(index).bytes) if sm is not None else ""


def _stage_summary(sm: StageMetrics, streamed: bool = False) -> str:
    walls = [t.wall_seconds for t in sm.tasks]
    queues = [t.queue_seconds for t in sm.tasks]
    parts = [
        f"{len(sm.tasks)} task(s) in {format_seconds(sm.seconds)}",
        f"output_rows={sm.rows}",
    ]
    if streamed:  # in memory, as its batches went to their reader: no file
        parts.append(f"streamed={format_bytes(sm.bytes)}")
    elif sm.bytes:
        parts.append(f"written={format_bytes(sm.bytes)}")
    if sm.read_bytes:
        parts.append(f"read={format_bytes(sm.read_bytes)} (fetched {format_bytes(sm.fetched_bytes)})")
    if walls:
        parts.append(f"task time max={format_seconds(max(walls))}")
    if any(queues):
        parts.append(f"queue max={format_seconds(max(queues))}")
    return ", ".join(parts)


def _task_line(task: TaskReport) -> str:
    parts = [f"task {task.task} on {task.worker}"]
    if task.attempt:
        parts.append(f"attempt {task.attempt}")
    parts.append(f"wall={format_seconds(task.wall_seconds)}")
    parts.append(f"queue={format_seconds(task.queue_seconds)}")
    parts.append(f"output_rows={task.rows}")
    if task.feed_units:
        parts.append(f"feed_units={task.feed_units}")
    if task.partitions:
        per_part = " ".join(f"{r}/{format_bytes(b)}" for r, b in task.partitions)
        parts.append(f"written=[{per_part}]")
    for inp in task.inputs:
        text = f"input {inp.index}: fetched={format_bytes(inp.fetched_bytes)}, local={format_bytes(inp.local_bytes)}"
        if inp.fetched_bytes:
            text += f", fetch_time={format_seconds(inp.fetch_seconds)}"
        parts.append(text)
    return "  " + ", ".join(parts)


def explain_analyze(plan: DistributedPlan, metrics: QueryMetrics, verbose: bool = False) -> str:
    """The distributed plan with every stage's, node's and input's metrics (see the module)."""
    text = display_distributed_plan(plan, MetricsAnnotations(metrics, verbose))
    return f"Query {metrics.query_id}: {format_seconds(metrics.seconds)}\n{text}"


def to_graphviz(plan: DistributedPlan, metrics: QueryMetrics | None = None) -> str:
    """Graphviz DOT of the stage DAG (see `render_graphviz`), with each stage's, task's and
    exchange's measures when `metrics` are given."""
    return render_graphviz(plan, MetricsAnnotations(metrics) if metrics is not None else None)


def to_mermaid(plan: DistributedPlan, metrics: QueryMetrics | None = None) -> str:
    """Mermaid flowchart of the stage DAG (see `render_mermaid`), with each stage's, task's and
    exchange's measures when `metrics` are given."""
    return render_mermaid(plan, MetricsAnnotations(metrics) if metrics is not None else None)
