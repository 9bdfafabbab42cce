"""The distributed plan rendered with what its run measured (EXPLAIN ANALYZE), and the stage
DAG as Graphviz DOT or Mermaid.

Node metrics are matched to the plan by walking the stage's plan and the executed plan's
metrics together: the executed plan is the stage's plan with each input boundary replaced by a
scan of the exchanged files (for a coalesce or merge, the boundary node over that scan).
"""

from __future__ import annotations

from ..execution_plans.display import Annotations, display_distributed_plan
from ..execution_plans.plan_node import PlanNode
from ..execution_plans.stage import BoundaryKind, DistributedPlan, Stage, StageInput
from .query_metrics import QueryMetrics, StageMetrics
from .task_metrics import NodeMetrics

# Metrics shown on every node; verbose shows all of them.
SUMMARY = ("output_rows", "elapsed_compute", "spill_count", "spilled_bytes", "spilled_rows")
_ALWAYS = ("output_rows", "elapsed_compute")


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def format_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f}s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f}ms"
    return f"{s * 1e6:.2f}µs"


def format_value(name: str, value: int) -> str:
    if name == "elapsed_compute" or name.endswith("_time") or "time_" in name or name.endswith("_ns"):
        return format_seconds(value / 1e9)
    if name.endswith("bytes"):
        return format_bytes(value)
    return str(value)


def _pair_nodes(stage: Stage, root: PlanNode, executed: NodeMetrics | None):
    """Map the stage's display nodes and inputs to executed-plan nodes, as the display walks."""
    nodes: dict[int, list[NodeMetrics | None]] = {}
    inputs: dict[int, NodeMetrics | None] = {}
    pending = list(stage.inputs)

    def walk(node: PlanNode, metrics: NodeMetrics | None) -> None:
        if metrics is not None and metrics.name != node.name and not _is_input(node, pending):
            metrics = None  # the executed plan differs here: show no numbers rather than wrong ones
        if pending and pending[0].boundary == node.raw:
            stage_input = pending.pop(0)
            if stage_input.kind is BoundaryKind.SHUFFLE:
                inputs[id(stage_input)] = metrics
            else:
                nodes[id(node)] = metrics
                inputs[id(stage_input)] = metrics.children[0] if metrics and metrics.children else None
            return
        nodes[id(node)] = metrics
        children = metrics.children if metrics is not None else ()
        for i, child in enumerate(node.children):
            walk(child, children[i] if i < len(children) and len(children) == len(node.children) else None)

    walk(root, executed)
    return nodes, inputs


def _is_input(node: PlanNode, pending: list[StageInput]) -> bool:
    return bool(pending) and pending[0].boundary == node.raw


class MetricsAnnotations(Annotations):
    """Annotates each stage with its totals, each node with its metrics summed over the
    stage's tasks, and each input with what was read; `verbose` adds every metric, each
    task's line and per-task row counts."""

    def __init__(self, plan: DistributedPlan, metrics: QueryMetrics, verbose: bool = False):
        self.metrics = metrics
        self.verbose = verbose
        self._nodes: dict[tuple[int, int], NodeMetrics | None] = {}
        self._per_task: dict[tuple[int, int], list[NodeMetrics | None]] = {}
        self._inputs: dict[tuple[int, int], NodeMetrics | None] = {}
        for stage in plan.stages:
            stage_metrics = metrics.stage(stage.id)
            if stage_metrics is None:
                continue
            nodes, inputs = _pair_nodes(stage, stage.root, stage_metrics.plan)
            self._nodes.update({(stage.id, k): v for k, v in nodes.items()})
            self._inputs.update({(stage.id, k): v for k, v in inputs.items()})
            if verbose:
                for task in stage_metrics.tasks:
                    task_nodes, _ = _pair_nodes(
                        stage, stage.root, task.metrics.plan if task.metrics else None
                    )
                    for key, value in task_nodes.items():
                        self._per_task.setdefault((stage.id, key), []).append(value)

    def header(self, stage: Stage) -> list[str]:
        sm = self.metrics.stage(stage.id)
        if sm is None:
            return ["metrics: (stage did not run)"]
        lines = [f"metrics: {_stage_summary(sm)}"]
        if self.verbose:
            lines.extend(_task_line(t) for t in sorted(sm.tasks, key=lambda t: t.task))
        return lines

    def node(self, stage: Stage, node: PlanNode) -> str:
        metrics = self._nodes.get((stage.id, id(node)))
        if metrics is None:
            return ""
        names = [n for n in SUMMARY if n in metrics.values]
        if self.verbose:
            names += [n for n in metrics.values if n not in SUMMARY]
        shown = [n for n in names if n in _ALWAYS or metrics.values[n] != 0 or self.verbose]
        parts = [f"{n}={format_value(n, metrics.values[n])}" for n in shown]
        per_task = self._per_task.get((stage.id, id(node)))
        if per_task and len(per_task) > 1 and "output_rows" in metrics.values:
            rows = " ".join(str(m.get("output_rows")) if m else "?" for m in per_task)
            parts.insert(1, f"output_rows per task=[{rows}]")
        return f"metrics=[{', '.join(parts)}]"

    def input(self, stage: Stage, stage_input: StageInput) -> str:
        sm = self.metrics.stage(stage.id)
        if sm is None:
            return ""
        index = stage.inputs.index(stage_input)
        totals = sm.input_totals(index)
        scan = self._inputs.get((stage.id, id(stage_input)))
        parts = []
        if scan is not None and "output_rows" in scan.values:
            parts.append(f"rows={scan.values['output_rows']}")
        parts.append(f"read={format_bytes(totals.bytes)}")
        parts.append(f"fetched={format_bytes(totals.fetched_bytes)} in {totals.files} file(s)")
        if totals.fetched_bytes:
            parts.append(f"fetch_time={format_seconds(totals.fetch_seconds)}")
        return f"metrics=[{', '.join(parts)}]"


def _stage_summary(sm: StageMetrics) -> str:
    walls = [t.wall_seconds for t in sm.tasks]
    queues = [t.queue_seconds for t in sm.tasks]
    parts = [
        f"{len(sm.tasks)} task(s) in {format_seconds(sm.seconds)}",
        f"output_rows={sm.rows}",
    ]
    if sm.bytes:
        parts.append(f"written={format_bytes(sm.bytes)}")
    if sm.read_bytes:
        parts.append(f"read={format_bytes(sm.read_bytes)} (fetched {format_bytes(sm.fetched_bytes)})")
    if walls:
        parts.append(f"task time max={format_seconds(max(walls))}")
    if any(queues):
        parts.append(f"queue max={format_seconds(max(queues))}")
    return ", ".join(parts)


def _task_line(task) -> str:
    parts = [f"task {task.task} on {task.worker}"]
    if task.attempt:
        parts.append(f"attempt {task.attempt}")
    parts.append(f"wall={format_seconds(task.wall_seconds)}")
    parts.append(f"queue={format_seconds(task.queue_seconds)}")
    parts.append(f"output_rows={task.rows}")
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
    text = display_distributed_plan(plan, MetricsAnnotations(plan, metrics, verbose))
    return f"Query {metrics.query_id}: {format_seconds(metrics.seconds)}\n{text}"


# -- the stage DAG ------------------------------------------------------------------------
def _task_label(stage: Stage, task: int, metrics: QueryMetrics | None) -> str:
    label = f"task {task}"
    sm = metrics.stage(stage.id) if metrics else None
    report = next((t for t in sm.tasks if t.task == task), None) if sm else None
    if report is not None:
        label += f"\\n{report.worker}\\n{report.rows} rows, {format_seconds(report.wall_seconds)}"
    return label


def _stage_title(stage: Stage, metrics: QueryMetrics | None) -> str:
    root = stage.root.name
    title = f"Stage {stage.id}: {root}"
    sm = metrics.stage(stage.id) if metrics else None
    if sm is not None:
        title += f" ({sm.rows} rows, {format_seconds(sm.seconds)})"
    return title


def _edges(plan: DistributedPlan, metrics: QueryMetrics | None):
    for stage in plan.stages:
        sm = metrics.stage(stage.id) if metrics else None
        for index, inp in enumerate(stage.inputs):
            label = f"{inp.kind.value}, {inp.partitions} partition{'s' if inp.partitions != 1 else ''}"
            if sm is not None:
                label += f", {format_bytes(sm.input_totals(index).bytes)}"
            yield inp.producer, stage.id, label


def _task_count(stage: Stage, metrics: QueryMetrics | None) -> int:
    sm = metrics.stage(stage.id) if metrics else None
    return len(sm.tasks) if sm is not None and sm.tasks else stage.task_count


def to_graphviz(plan: DistributedPlan, metrics: QueryMetrics | None = None) -> str:
    """Graphviz DOT of the stage DAG: a cluster of task nodes per stage, an edge per exchange
    (from producer stage to consumer stage, labelled with its kind and partitions)."""
    lines = [
        "digraph distributed_plan {",
        "  compound=true;",
        "  rankdir=BT;",
        "  node [shape=box, fontsize=10];",
    ]
    for stage in plan.stages:
        lines.append(f"  subgraph cluster_stage_{stage.id} {{")
        lines.append(f'    label="{_stage_title(stage, metrics)}";')
        for task in range(_task_count(stage, metrics)):
            lines.append(f'    s{stage.id}_t{task} [label="{_task_label(stage, task, metrics)}"];')
        lines.append("  }")
    for producer, consumer, label in _edges(plan, metrics):
        lines.append(
            f"  s{producer}_t0 -> s{consumer}_t0 [ltail=cluster_stage_{producer}, "
            f'lhead=cluster_stage_{consumer}, label="{label}"];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(plan: DistributedPlan, metrics: QueryMetrics | None = None) -> str:
    """Mermaid flowchart of the stage DAG: a subgraph of task nodes per stage and an edge per
    exchange between stages."""
    lines = ["flowchart BT"]
    for stage in plan.stages:
        lines.append(f'  subgraph stage{stage.id}["{_stage_title(stage, metrics)}"]')
        for task in range(_task_count(stage, metrics)):
            label = _task_label(stage, task, metrics).replace("\\n", "<br/>")
            lines.append(f'    s{stage.id}_t{task}["{label}"]')
        lines.append("  end")
    for producer, consumer, label in _edges(plan, metrics):
        lines.append(f'  stage{producer} -- "{label}" --> stage{consumer}')
    return "\n".join(lines) + "\n"
