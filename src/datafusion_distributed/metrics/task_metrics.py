"""What one task measured: DataFusion's metrics for every node of its plan, what it fetched, and
how long it ran. Built on the worker, carried back in `TaskResult.metrics`, validated and
bounded on arrival like every other field of the protocol.

Rows and bytes written per output partition are already in `TaskResult.partitions`; they are
not repeated here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..common.checks import Checks
from ..runtime.task_plan import added_yield_point

MAX_NODES = 2048  # plan nodes reported per task; larger plans are cut off
MAX_DEPTH = 200  # and nesting, well inside Python's recursion limit
MAX_VALUES = 64  # metric names per node
MAX_INPUTS = 1024
MAX_NAME = 128
MAX_INT = 1 << 62

# DataFusion metrics that are ratios or points in time: summing them means nothing.
_SKIPPED = {"start_timestamp", "end_timestamp", "selectivity", "reduction_factor"}


@dataclass(frozen=True)
class NodeMetrics:
    """One plan node: its name (`AggregateExec`) and DataFusion's metrics summed over its
    partitions (times in nanoseconds, as DataFusion records them)."""

    name: str
    values: dict[str, int]
    children: tuple[NodeMetrics, ...] = ()

    def get(self, name: str, default: int = 0) -> int:
        """The value of metric `name`, `default` if the node has none."""
        return self.values.get(name, default)

    def walk(self) -> Iterator[NodeMetrics]:
        """This node and every node below it, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class InputMetrics:
    """What a task read of its input `index` (in the order of the stage's inputs): bytes fetched over the network from other workers,
    bytes read in place (outputs on its own worker), files, and the time spent fetching
    (`fetch_seconds`: summed over files; `fetch_wall_seconds`: first fetch start to last end)."""

    index: int
    fetched_bytes: int = 0
    local_bytes: int = 0
    files: int = 0
    fetch_seconds: float = 0.0
    fetch_wall_seconds: float = 0.0

    @property
    def bytes(self) -> int:
        """Bytes read of the input, fetched or in place."""
        return self.fetched_bytes + self.local_bytes


@dataclass(frozen=True)
class TaskMetrics:
    """Everything one task measured.

    Attributes:
        worker: URL of the worker that ran it ("coordinator" for the head stage).
        wall_seconds: from the worker receiving the task to its answer.
        queue_seconds: time outside the worker: the coordinator's round trip minus
            `wall_seconds` (waiting for a dispatch thread, the request and the answer on the
            network, waiting for a Flight thread). Filled in by the coordinator.
        plan: the executed plan's nodes with their DataFusion metrics (None if unavailable).
        inputs: per input stage, what was read.
    """

    worker: str
    wall_seconds: float
    queue_seconds: float = 0.0
    plan: NodeMetrics | None = None
    inputs: tuple[InputMetrics, ...] = field(default_factory=tuple)

    @property
    def fetched_bytes(self) -> int:
        """Bytes the task fetched over the network, over all its inputs."""
        return sum(i.fetched_bytes for i in self.inputs)


def plan_metrics(plan: Any, budget: list[int] | None = None, depth: int = 0) -> NodeMetrics | None:
    """DataFusion's metrics of every node of an executed `ExecutionPlan` (at most MAX_NODES,
    MAX_DEPTH deep).

    Works on a plan that stopped early (a LIMIT reached): nodes report what they did."""
    budget = [MAX_NODES] if budget is None else budget
    if budget[0] <= 0 or depth > MAX_DEPTH:
        return None
    line = plan.display().split("\n", 1)[0].strip()
    join = added_yield_point(plan, line)
    if join is not None:  # not in the stage's plan, whose nodes these metrics are matched to
        return plan_metrics(join, budget, depth)
    budget[0] -= 1
    values: dict[str, int] = {}
    # A plan holds one metric object per partition and name (over a thousand in a TPC-H
    # stage); the binding's own objects skip a Python wrapper each, which halves the cost.
    raw = getattr(plan, "_raw_plan", None)
    metrics = raw.metrics() if raw is not None else plan.metrics()
    if metrics is not None:
        for metric in metrics.metrics():
            value = metric.value
            if type(value) is not int:  # timestamps and unset values
                continue
            name = metric.name[:MAX_NAME]
            if name in values:
                values[name] += value
            elif name not in _SKIPPED and len(values) < MAX_VALUES:
                values[name] = value
    children = []
    for child in plan.children():
        node = plan_metrics(child, budget, depth + 1)
        if node is None:
            break
        children.append(node)
    return NodeMetrics(line.split(":", 1)[0].strip()[:MAX_NAME], values, tuple(children))


def summed(first: NodeMetrics | None, second: NodeMetrics | None) -> NodeMetrics | None:
    """The metrics of two runs of one plan (a task's rounds) added node by node; None when
    either is unknown."""
    if first is None or second is None or first.name != second.name:
        return None
    if len(first.children) != len(second.children):
        return None
    values = dict(first.values)
    for name, value in second.values.items():
        values[name] = values.get(name, 0) + value
    children = [summed(a, b) for a, b in zip(first.children, second.children, strict=True)]
    kept = tuple(child for child in children if child is not None)
    if len(kept) != len(children):
        return None
    return NodeMetrics(first.name, values, kept)


# -- validation of what arrives on the wire ---------------------------------------------------
class MetricsError(ValueError):
    """Metrics in a task result that are malformed or too large."""


_checks = Checks(MetricsError)
_check = _checks.check
_int = functools.partial(_checks.integer, high=MAX_INT, range_in_message=False)
_str = functools.partial(_checks.string, limit=MAX_NAME)


def _seconds(value: Any, name: str) -> float:
    _check(isinstance(value, (int, float)) and not isinstance(value, bool), f"{name} must be a number")
    _check(math.isfinite(value) and 0 <= value < 1e9, f"{name} is out of range")
    return float(value)


def _fields(raw: Any, names: set[str], what: str) -> dict:
    _check(isinstance(raw, dict), f"{what} must be an object")
    unknown = set(raw) - names
    _check(not unknown, f"unknown {what} fields {sorted(unknown)}")
    return raw


def _node(raw: Any, budget: list[int], depth: int) -> NodeMetrics:
    _check(depth <= MAX_DEPTH, "plan metrics are nested too deeply")
    budget[0] -= 1
    _check(budget[0] >= 0, f"plan metrics have more than {MAX_NODES} nodes")
    raw = _fields(raw, {"name", "values", "children"}, "node metrics")
    values = raw.get("values", {})
    _check(isinstance(values, dict) and len(values) <= MAX_VALUES, f"at most {MAX_VALUES} values per node")
    children = raw.get("children", [])
    _check(isinstance(children, list), "node children must be a list")
    return NodeMetrics(
        _str(raw.get("name"), "node name"),
        {_str(k, "metric name"): _int(v, f"metric {k}") for k, v in values.items()},
        tuple(_node(c, budget, depth + 1) for c in children),
    )


def _input(raw: Any) -> InputMetrics:
    raw = _fields(raw, {f for f in InputMetrics.__dataclass_fields__}, "input metrics")
    return InputMetrics(
        index=_int(raw.get("index"), "input index"),
        fetched_bytes=_int(raw.get("fetched_bytes", 0), "fetched_bytes"),
        local_bytes=_int(raw.get("local_bytes", 0), "local_bytes"),
        files=_int(raw.get("files", 0), "files"),
        fetch_seconds=_seconds(raw.get("fetch_seconds", 0.0), "fetch_seconds"),
        fetch_wall_seconds=_seconds(raw.get("fetch_wall_seconds", 0.0), "fetch_wall_seconds"),
    )


def decode_task_metrics(raw: Any) -> TaskMetrics:
    """TaskMetrics from its JSON form, refusing anything malformed or over the size bounds."""
    raw = _fields(raw, {f for f in TaskMetrics.__dataclass_fields__}, "task metrics")
    inputs = raw.get("inputs", [])
    _check(isinstance(inputs, list) and len(inputs) <= MAX_INPUTS, f"at most {MAX_INPUTS} inputs")
    plan = raw.get("plan")
    return TaskMetrics(
        worker=_str(raw.get("worker"), "worker", limit=4096),
        wall_seconds=_seconds(raw.get("wall_seconds"), "wall_seconds"),
        queue_seconds=_seconds(raw.get("queue_seconds", 0.0), "queue_seconds"),
        plan=None if plan is None else _node(plan, [MAX_NODES], 0),
        inputs=tuple(_input(i) for i in inputs),
    )


@dataclass(frozen=True)
class FileRead:
    """One input file a task read: of its input `index`, over the network or in place."""

    index: int
    bytes: int
    remote: bool
    start: float
    end: float


def input_metrics(inputs: int, reads: list[FileRead]) -> tuple[InputMetrics, ...]:
    """Per input of a task (`inputs` of them), totals of the files it read."""
    out = []
    for index in range(inputs):
        mine = [r for r in reads if r.index == index]
        remote = [r for r in mine if r.remote]
        out.append(
            InputMetrics(
                index=index,
                fetched_bytes=sum(r.bytes for r in remote),
                local_bytes=sum(r.bytes for r in mine if not r.remote),
                files=len(mine),
                fetch_seconds=sum(r.end - r.start for r in remote),
                fetch_wall_seconds=(max(r.end for r in remote) - min(r.start for r in remote))
                if remote
                else 0.0,
            )
        )
    return tuple(out)
