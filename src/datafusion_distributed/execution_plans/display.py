"""Render a distributed plan as text: boxed stages, their nodes, inputs and each task's files.

The final stage comes first and its producers follow (top-down, like EXPLAIN):

    ┌───── Stage 2 ── tasks=1 partitions=1 ── output=result
    │ tasks: desired=1, workers/cap=3, splittable partitions=1
    │ SortPreservingMergeExec: [revenue@1 DESC], fetch=10
    │   [input stage 1: merge, whole, 3 partitions]
    └─────
    ┌───── Stage 1 ── tasks=3 partitions=6 ── output=shuffle
    │ ...
    │     DataSourceExec: file_groups={4 groups}, projection=[...], file_type=parquet
    │       task 0: [orders.1.parquet] [orders.2.parquet]
    │       task 1: [orders.3.parquet] [orders.4.parquet:0..1024]
    └─────

A cut input is shown as one line in place of its subtree (for a coalesce or merge the
boundary node itself still runs in the consumer, so it is shown with the input below it).
File paths are shortened to their base names, so the text does not depend on where the data
lives.
"""

from __future__ import annotations

import posixpath

from ..codec import ScannedFile, file_groups, scan_kind
from ..codec.sink import FileSink
from .plan_node import PlanNode, whole_children
from .stage import DistributedPlan, Stage, StageInput

MAX_LINE = 160
RULE = "─────"
INDENT = "  "


def _truncate(line: str, width: int = MAX_LINE) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _file_label(file: ScannedFile) -> str:
    name = posixpath.basename(file.path.rstrip("/")) or file.path
    return f"{name}:{file.range[0]}..{file.range[1]}" if file.range else name


def _group_tokens(groups) -> list[str]:
    """`[a, b] [c]` as the tokens `[a,`, `b]`, `[c]`: the points where a long list may wrap."""
    if not groups:
        return ["(no files)"]
    tokens: list[str] = []
    for group in groups:
        labels = [_file_label(f) for f in group] or [""]
        labels[0] = "[" + labels[0]
        labels[-1] = labels[-1] + "]"
        tokens.extend(label + "," for label in labels[:-1])
        tokens.append(labels[-1])
    return tokens


def _wrap(prefix: str, tokens: list[str], width: int) -> list[str]:
    """`prefix` and the tokens separated by spaces, wrapped to `width` under the first token."""
    lines, line = [], prefix
    for token in tokens:
        if line != prefix and len(line) + 1 + len(token) > width:
            lines.append(line)
            line = " " * len(prefix) + token
        else:
            line = line + token if line == prefix else line + " " + token
    lines.append(line)
    return lines


def _matching_brace(text: str, start: int) -> int:
    """Index of the `}` closing the `{` at `start` (brackets inside are balanced), or -1."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "{[":
            depth += 1
        elif text[i] in "}]":
            depth -= 1
            if depth == 0:
                return i if text[i] == "}" else -1
    return -1


def node_label(node: PlanNode) -> str:
    """The node's display line with file paths shortened: a scan's file list (shown per task
    below it) becomes its group count, and any other path its base name."""
    line = node.line
    if scan_kind(node.raw) is None:
        return line
    groups = file_groups(node.raw)
    for path in sorted({f.path for g in groups for f in g}, key=len, reverse=True):
        line = line.replace(path, posixpath.basename(path))
    key = "file_groups={"
    start = line.find(key)
    if start >= 0:
        end = _matching_brace(line, start + len(key) - 1)
        if end > 0:
            count = len(groups)
            summary = f"file_groups={{{count} group{'s' if count != 1 else ''}}}"
            line = line[:start] + summary + line[end + 1 :]
    return line


def _input_label(stage_input: StageInput) -> str:
    share = "split" if stage_input.split else "whole"
    plural = "s" if stage_input.partitions != 1 else ""
    source = (
        f"stage {stage_input.producer}: {stage_input.where.kind.value}"
        if stage_input.table is None
        else f"{stage_input.table.describe()}"
    )
    return f"[input {source}, {share}, {stage_input.partitions} partition{plural}]"


NodePath = tuple[int, ...]
"""Where a node stands in its stage: the child indices that lead to it from the stage's root
(the root itself is `()`). The plan a task executes has the stage plan's shape down to its input
boundaries, so a path names the same node there (see `Annotations`)."""


class Annotations:
    """Extra text for a rendered plan, asked for once per line as the renderer walks each stage
    (EXPLAIN ANALYZE adds metrics this way); by default none.

    Nodes and inputs are keyed by their `NodePath` in the stage, so a hook finds what belongs to
    a node by following the path (in an executed plan, say) instead of walking the stage again.
    """

    def header(self, stage: Stage) -> list[str]:
        """Lines under the header line of `stage`."""
        return []

    def node(self, stage: Stage, path: NodePath, node: PlanNode, reads: StageInput | None) -> str:
        """Text after the line of `node`, at `path` in `stage`. `reads` is the input the node
        reads when it is a coalesce or merge boundary (it runs in this stage over that input)."""
        return ""

    def input(self, stage: Stage, path: NodePath, stage_input: StageInput) -> str:
        """Text after the line of `stage_input`; `path` is where its boundary node stands (for a
        shuffle the input is read in place of that node, for a coalesce or merge below it)."""
        return ""


class _StageRenderer:
    """Renders one stage's nodes, inputs and files in a single walk of its plan."""

    def __init__(self, stage: Stage, annotations: Annotations | None = None) -> None:
        self.stage = stage
        self.annotations = annotations or Annotations()
        self.pending_inputs = list(stage.inputs)
        # Per scan of the stage's tasks: its files for each task, matched to scan nodes below.
        self.scan_entries = [
            (index, kind, [task.scans[index][1] for task in stage.tasks])
            for index, (kind, _) in enumerate(stage.tasks[0].scans if stage.tasks else ())
        ]
        self.lines: list[str] = []

    def render(self) -> list[str]:
        self._node(self.stage.root, (), depth=0, whole=False)
        for stage_input in self.pending_inputs:  # not found in the tree: still show it
            self._emit(0, _input_label(stage_input) + " (boundary not found in the stage)")
        return self.lines

    def _emit(self, depth: int, text: str, suffix: str = "") -> None:
        # the plan's own text is cut to the line width; annotations after it are kept whole
        line = _truncate(INDENT * depth + text, MAX_LINE - len("│ "))
        self.lines.append(line + (", " + suffix if suffix else ""))

    def _node(self, node: PlanNode, path: NodePath, depth: int, whole: bool) -> None:
        annotate, stage = self.annotations, self.stage
        if self.pending_inputs and self.pending_inputs[0].where.boundary == node.raw:
            stage_input = self.pending_inputs.pop(0)
            # a coalesce or merge boundary runs in this stage too, over the input
            if stage_input.where.runs_boundary:
                self._emit(depth, node_label(node), annotate.node(stage, path, node, stage_input))
                depth += 1
            self._emit(depth, _input_label(stage_input), annotate.input(stage, path, stage_input))
            return
        self._emit(depth, node_label(node), annotate.node(stage, path, node, None))
        feed = next((f for f in self.stage.feeds if f.scan == node.raw), None)
        if feed is not None:
            self._emit(depth + 1, feed.describe())
            return
        if scan_kind(node.raw) is not None:
            self._scan_files(node, depth + 1, whole)
            return
        whole_idx = whole_children(node)
        for i, child in enumerate(node.children):
            self._node(child, (*path, i), depth + 1, whole or i in whole_idx)

    def _scan_files(self, node: PlanNode, depth: int, whole: bool) -> None:
        groups = [tuple(g) for g in file_groups(node.raw)]
        kind = scan_kind(node.raw)
        for position, (_, entry_kind, per_task) in enumerate(self.scan_entries):
            if entry_kind != kind:
                continue
            every_task_all = all(list(t) == groups for t in per_task)
            # tasks sharing scans out read only their partitions with files (see file pruning)
            shared_out = [g for t in per_task for g in t] == [g for g in groups if g]
            if (every_task_all and (whole or len(per_task) == 1)) or (shared_out and not whole):
                del self.scan_entries[position]
                break
        else:
            self._emit(depth, "(files of this scan not found among the stage's tasks)")
            return
        if not any(groups):
            self._emit(depth, "(no files: every file skipped by statistics)")
            return
        if every_task_all and (whole or len(per_task) == 1):
            label = "every task" if len(per_task) > 1 else "task 0"
            self._files(depth, label, groups)
            return
        for index, task_groups in enumerate(per_task):
            self._files(depth, f"task {index}", task_groups)

    def _files(self, depth: int, label: str, groups) -> None:
        width = MAX_LINE - len("│ ") - len(INDENT * depth)
        for line in _wrap(f"{label}: ", _group_tokens(groups), width):
            self._emit(depth, line)


def _write_label(sink: FileSink) -> str:
    """What a write stage writes, and how: for the stage's header."""
    partitions = f", partitioned by ({', '.join(sink.partition_columns)})" if sink.partition_columns else ""
    return (
        f"{sink.kind} files into {sink.destination}{partitions}; each task stages its own files, "
        "committed when the query succeeds"
    )


def display_stage(stage: Stage, annotations: Annotations | None = None) -> str:
    """One stage as a box of text lines; `annotations` add text to its header, nodes and inputs."""
    output = stage.output.value if stage.output is not None else "result"
    header = (
        f"┌{RULE} Stage {stage.id} ── tasks={stage.task_count} "
        f"partitions={stage.root.partitions} ── output={output}"
    )
    lines = [header]
    if stage.reason:
        lines.append(f"│ tasks: {stage.reason}")
    if stage.sink is not None:
        lines.append(f"│ write: {_write_label(stage.sink)}")
    if annotations is not None:
        lines.extend(f"│ {line}" for line in annotations.header(stage))
    lines.extend("│ " + line for line in _StageRenderer(stage, annotations).render())
    lines.append(f"└{RULE}")
    return "\n".join(lines)


def display_distributed_plan(plan: DistributedPlan, annotations: Annotations | None = None) -> str:
    """The whole plan, final stage first, each stage followed by the stages it reads;
    `annotations` add text to it (metrics, for EXPLAIN ANALYZE)."""
    stages = [display_stage(stage, annotations) for stage in reversed(plan.stages)]
    header = [f"settings: {', '.join(plan.settings)}"] if plan.settings else []
    if plan.object_stores and plan.is_distributed:
        header.append(f"object stores: {'; '.join(store.describe() for store in plan.object_stores)}")
    header.extend(f"files: {line}" for line in plan.pruned)
    return "\n".join(header + stages) + "\n"
