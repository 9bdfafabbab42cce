"""Annotation hooks: the display asks for each node's text by the node's path in its stage, and
the stage DAG drawings take their notes the same way."""

from __future__ import annotations

from datafusion_distributed.execution_plans import display_stage
from datafusion_distributed.execution_plans.display import Annotations, NodePath
from datafusion_distributed.execution_plans.graph import GraphAnnotations, render_graphviz, render_mermaid
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.execution_plans.stage import (
    BoundaryKind,
    DistributedPlan,
    InputBoundary,
    Stage,
    StageInput,
    TaskPlan,
)


def node(line: str, *children: PlanNode) -> PlanNode:
    return PlanNode(line.split(":", 1)[0].strip(), line, 2, line.encode(), children)


SCAN = node("DataSourceExec: file_groups={1 group}")
MERGE = node("SortPreservingMergeExec: [k@0 ASC]", node("SortExec: expr=[k@0 ASC]", SCAN))
SHUFFLE = node("RepartitionExec: partitioning=Hash([k@0], 2)", node("ProjectionExec: expr=[k@0 as k]", SCAN))
JOIN = node("HashJoinExec: mode=Partitioned, join_type=Inner", MERGE, SHUFFLE)
ROOT = node("ProjectionExec: expr=[k@0 as k]", node("FilterExec: k@0 > 1", JOIN))
MERGE_INPUT = StageInput(
    InputBoundary(b"m", BoundaryKind.MERGE, MERGE.raw, MERGE.children[0].raw), 1, 2, False
)
SHUFFLE_INPUT = StageInput(InputBoundary(b"s", BoundaryKind.SHUFFLE, SHUFFLE.raw, b""), 2, 2, True)
STAGE = Stage(3, ROOT, b"", (MERGE_INPUT, SHUFFLE_INPUT), (TaskPlan(0, b"", (), ()),), None)


def at(path: NodePath) -> PlanNode:
    found = ROOT
    for index in path:
        found = found.children[index]
    return found


class Recorder(Annotations):
    """Notes every call, and annotates the node and the input at the paths it is given."""

    def __init__(self, node_path: NodePath | None = None, input_path: NodePath | None = None):
        self.node_path, self.input_path = node_path, input_path
        self.nodes: list[tuple[NodePath, PlanNode, StageInput | None]] = []
        self.inputs: list[tuple[NodePath, StageInput]] = []

    def node(self, stage: Stage, path: NodePath, node: PlanNode, reads: StageInput | None) -> str:
        self.nodes.append((path, node, reads))
        return "NOTE" if path == self.node_path else ""

    def input(self, stage: Stage, path: NodePath, stage_input: StageInput) -> str:
        self.inputs.append((path, stage_input))
        return "INPUT NOTE" if path == self.input_path else ""


def changed_lines(annotated: str) -> list[tuple[str, str]]:
    plain = display_stage(STAGE).splitlines()
    lines = annotated.splitlines()
    assert len(lines) == len(plain)
    return [(before, after) for before, after in zip(plain, lines, strict=True) if before != after]


def test_a_node_annotated_by_path_shows_on_exactly_that_node():
    join = "│     HashJoinExec: mode=Partitioned, join_type=Inner"
    assert changed_lines(display_stage(STAGE, Recorder(node_path=(0, 0)))) == [(join, join + ", NOTE")]


def test_an_input_is_keyed_by_the_path_of_its_boundary():
    changed = changed_lines(display_stage(STAGE, Recorder(input_path=(0, 0, 1))))
    assert [after for _, after in changed] == [
        "│       [input stage 2: shuffle, split, 2 partitions], INPUT NOTE"
    ]


def test_every_shown_node_is_asked_for_once_by_the_path_that_leads_to_it():
    hook = Recorder()
    display_stage(STAGE, hook)
    paths = [path for path, _, _ in hook.nodes]
    assert paths == [(), (0,), (0, 0), (0, 0, 0)]  # below an input's boundary nothing is shown
    assert all(at(path) is shown for path, shown, _ in hook.nodes)
    # the merge runs in this stage over its input; the shuffle is replaced by its input
    assert [reads for _, _, reads in hook.nodes] == [None, None, None, MERGE_INPUT]
    assert hook.inputs == [((0, 0, 0), MERGE_INPUT), ((0, 0, 1), SHUFFLE_INPUT)]


class EdgeNote(GraphAnnotations):
    def stage_note(self, stage: Stage) -> str:
        return "ran" if stage.id == 3 else ""

    def task_note(self, stage: Stage, task: int) -> list[str]:
        return ["worker-a"]

    def edge_note(self, stage: Stage, index: int) -> str:
        return "12 B" if index == 1 else ""


def test_graph_notes_show_where_they_are_keyed():
    producers = [
        Stage(i, SCAN, b"", (), (TaskPlan(0, b"", (), ()),), kind)
        for i, kind in ((1, BoundaryKind.MERGE), (2, BoundaryKind.SHUFFLE))
    ]
    plan = DistributedPlan((*producers, STAGE))
    dot = render_graphviz(plan, EdgeNote())
    assert 'label="Stage 3: ProjectionExec (ran)";' in dot and 'label="Stage 1: DataSourceExec";' in dot
    assert 's3_t0 [label="task 0\\nworker-a"];' in dot
    assert 'lhead=cluster_stage_3, label="merge, 2 partitions"];' in dot
    assert 'lhead=cluster_stage_3, label="shuffle, 2 partitions, 12 B"];' in dot
    mermaid = render_mermaid(plan, EdgeNote())
    assert '    s3_t0["task 0<br/>worker-a"]' in mermaid
    assert '  stage2 -- "shuffle, 2 partitions, 12 B" --> stage3' in mermaid
    assert 'label="Stage 3: ProjectionExec";' in render_graphviz(plan)
    assert "worker-a" not in render_mermaid(plan)
