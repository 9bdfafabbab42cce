"""A task input on the wire: what of its boundary it carries, checked when it is read, and the
size a worker accepts, refused with an error that says by how much."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed.distributed_planner.build_stages import input_marker
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.execution_plans.stage import BoundaryKind, InputBoundary
from datafusion_distributed.protocol.messages import (
    MAX_MESSAGE_BYTES,
    FileLocation,
    ProtocolError,
    RunTask,
    TaskInput,
    decode_run_task,
    encode,
)

MARKER = input_marker(0)
FILES = ((FileLocation("grpc://127.0.0.1:1", 0, 0, 0, "part-0.arrow", 10),),)
SCHEMA = pa.schema([("k", pa.int64())]).serialize().to_pybytes()


def coalesce() -> PlanNode:
    """A CoalescePartitionsExec over a memory table: the boundary of a coalesce input."""
    ctx = SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"k": list(range(1000))})]] * 2)
    node = PlanNode.from_plan(ctx.sql("SELECT k FROM t LIMIT 3").execution_plan())
    while node.name != "CoalescePartitionsExec":
        node = node.children[0]
    return node


def where(kind: BoundaryKind) -> InputBoundary:
    node = coalesce()
    return InputBoundary(MARKER, kind, node.raw, node.children[0].raw)


def run_task(*inputs: TaskInput) -> RunTask:
    return RunTask("inputsquery", 1, 0, 0, MARKER, inputs, "grpc://127.0.0.1:1", None)


def test_a_coalesce_read_from_files_carries_its_node_alone():
    full = where(BoundaryKind.COALESCE)
    sent = full.read_from_files()
    assert sent.boundary_child == MARKER
    assert full.boundary_child not in sent.boundary  # the table's rows stay behind
    assert len(sent.boundary) < len(full.boundary) // 10
    message = run_task(TaskInput.of(sent, SCHEMA, FILES))
    assert decode_run_task(encode(message)) == message


def test_a_shuffle_read_from_files_carries_no_boundary():
    sent = where(BoundaryKind.SHUFFLE).read_from_files()
    assert (sent.boundary, sent.boundary_child) == (b"", b"")
    message = run_task(TaskInput.of(sent, SCHEMA, FILES))
    assert decode_run_task(encode(message)) == message


@pytest.mark.parametrize(
    "task_input, reason",
    [
        (
            TaskInput(MARKER, "shuffle", None, b"", b"", None),
            "an input with no files must carry the boundary subtree",
        ),
        (
            TaskInput(MARKER, "coalesce", SCHEMA, b"node", b"", FILES),
            "a coalesce input must carry its boundary node over the child",
        ),
        (
            TaskInput(MARKER, "merge", SCHEMA, b"node", b"child", FILES),
            "a merge input must carry its boundary node over the child",
        ),
    ],
)
def test_an_input_missing_what_it_runs_is_refused(task_input, reason):
    with pytest.raises(ProtocolError, match=reason):
        decode_run_task(encode(run_task(task_input)))


def test_a_message_too_large_says_by_how_much():
    huge = b'{"x":"' + b"y" * MAX_MESSAGE_BYTES + b'"}'
    with pytest.raises(
        ProtocolError, match=r"\(64\.0 MiB\) exceeds the limit of 67108864 bytes \(64\.0 MiB\)"
    ):
        decode_run_task(huge)
