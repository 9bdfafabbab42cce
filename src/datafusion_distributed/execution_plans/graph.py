"""Draw a distributed plan's stage DAG as Graphviz DOT or a Mermaid flowchart: a box per task
grouped by stage, and an edge per exchange from the producer stage to the consumer stage.

What a run measured is added through a `GraphAnnotations` hook, as the text display takes its
`Annotations`; by default the drawing shows the plan alone.
"""

from __future__ import annotations

from collections.abc import Iterator

from .stage import DistributedPlan, Stage


class GraphAnnotations:
    """Extra text for a drawn stage DAG (EXPLAIN ANALYZE adds metrics this way); by default none."""

    def stage_note(self, stage: Stage) -> str:
        """Text shown in brackets after the title of `stage`."""
        return ""

    def task_count(self, stage: Stage) -> int:
        """How many task boxes to draw for `stage`: the tasks the plan gives it, unless a run
        says otherwise."""
        return stage.task_count

    def task_note(self, stage: Stage, task: int) -> list[str]:
        """Lines under the label of task `task` of `stage`."""
        return []

    def edge_note(self, stage: Stage, index: int) -> str:
        """Text after the label of the edge of input `index` of `stage` (the consumer)."""
        return ""


def _stage_title(stage: Stage, annotations: GraphAnnotations) -> str:
    title = f"Stage {stage.id}: {stage.root.name}"
    note = annotations.stage_note(stage)
    return f"{title} ({note})" if note else title


def _task_label(stage: Stage, task: int, annotations: GraphAnnotations) -> str:
    """The task's label, lines separated by an escaped newline as DOT writes them."""
    return "\\n".join([f"task {task}", *annotations.task_note(stage, task)])


def _edges(plan: DistributedPlan, annotations: GraphAnnotations) -> Iterator[tuple[int, int, str]]:
    """(producer stage, consumer stage, label) for every exchange between stages (a shipped
    memory table is a node of its own: see `_table_edges`)."""
    for stage in plan.stages:
        for index, inp in enumerate(stage.inputs):
            if inp.table is not None:
                continue
            label = f"{inp.where.kind.value}, {inp.partitions} partition{'s' if inp.partitions != 1 else ''}"
            note = annotations.edge_note(stage, index)
            yield inp.producer, stage.id, f"{label}, {note}" if note else label


def _table_edges(plan: DistributedPlan) -> Iterator[tuple[int, int, str]]:
    """(table id, consumer stage, the table's description) for every shipped memory table."""
    for stage in plan.stages:
        for inp in stage.inputs:
            if inp.table is not None:
                yield inp.table.id, stage.id, inp.table.describe()


def render_graphviz(plan: DistributedPlan, annotations: GraphAnnotations | None = None) -> str:
    """Graphviz DOT of the stage DAG: a cluster of task nodes per stage, an edge per exchange
    (from producer stage to consumer stage, labelled with its kind and partitions)."""
    annotations = annotations or GraphAnnotations()
    lines = [
        "digraph distributed_plan {",
        "  compound=true;",
        "  rankdir=BT;",
        "  node [shape=box, fontsize=10];",
    ]
    if plan.settings:
        lines.insert(1, f"  // settings: {', '.join(plan.settings)}")
    for stage in plan.stages:
        lines.append(f"  subgraph cluster_stage_{stage.id} {{")
        lines.append(f'    label="{_stage_title(stage, annotations)}";')
        for task in range(annotations.task_count(stage)):
            lines.append(f'    s{stage.id}_t{task} [label="{_task_label(stage, task, annotations)}"];')
        lines.append("  }")
    for producer, consumer, label in _edges(plan, annotations):
        lines.append(
            f"  s{producer}_t0 -> s{consumer}_t0 [ltail=cluster_stage_{producer}, "
            f'lhead=cluster_stage_{consumer}, label="{label}"];'
        )
    for table, consumer, label in _table_edges(plan):
        lines.append(f'  table_{table} [shape=cylinder, label="{label}"];')
        lines.append(f"  table_{table} -> s{consumer}_t0 [lhead=cluster_stage_{consumer}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_mermaid(plan: DistributedPlan, annotations: GraphAnnotations | None = None) -> str:
    """Mermaid flowchart of the stage DAG: a subgraph of task nodes per stage and an edge per
    exchange between stages."""
    annotations = annotations or GraphAnnotations()
    lines = ["flowchart BT"]
    if plan.settings:
        lines.append(f"  %% settings: {', '.join(plan.settings)}")
    for stage in plan.stages:
        lines.append(f'  subgraph stage{stage.id}["{_stage_title(stage, annotations)}"]')
        for task in range(annotations.task_count(stage)):
            label = _task_label(stage, task, annotations).replace("\\n", "<br/>")
            lines.append(f'    s{stage.id}_t{task}["{label}"]')
        lines.append("  end")
    for producer, consumer, label in _edges(plan, annotations):
        lines.append(f'  stage{producer} -- "{label}" --> stage{consumer}')
    for table, consumer, label in _table_edges(plan):
        lines.append(f'  table{table}[("{label}")] --> stage{consumer}')
    return "\n".join(lines) + "\n"
