"""Random and mutated messages thrown at an authenticated worker: every one is answered with an
error (never a crash or a hang), none changes the worker's state, and it still serves queries."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from datafusion import SessionContext
from hypothesis import given, settings
from hypothesis import strategies as st

from datafusion_distributed import DistributedContext, EmbeddedCluster
from datafusion_distributed.protocol.auth import connect_options
from datafusion_distributed.protocol.messages import (
    PROTOCOL_VERSION,
    FileLocation,
    RunTask,
    TaskInput,
    Ticket,
    encode,
)

ACTIONS = ["run_task", "release", "cancel", "health", "heartbeat", "read_output", "format_disk", ""]
QUERY_IDS = st.sampled_from(
    ["../../etc", "/etc/passwd", "..", ".", "a/b", "a\\b", "q\x00", "", "x" * 65, "ok_query-1", "é"]
) | st.text(max_size=80)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def worker():
    with EmbeddedCluster(1) as cluster:
        client = flight.connect(cluster.get_urls()[0], **connect_options(cluster.auth_token, None))
        yield cluster, cluster.workers[0], client
        client.close()


@pytest.fixture(scope="module")
def plan_bytes():
    ctx = SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"k": list(range(100))})]])
    return ctx.sql("SELECT k * 2 AS v FROM t WHERE k > 3").execution_plan().to_bytes()


def _valid_run_task(plan: bytes, worker_url: str) -> dict:
    message = RunTask("fuzzquery", 0, 0, 0, plan, (), worker_url, "lz4")
    return json.loads(encode(message))


def _corrupt(plan: bytes, data) -> bytes:
    """Plan bytes that cannot be a plan: truncated, random, or flipped then truncated."""
    how = data.draw(st.sampled_from(["truncate", "random", "flip"]))
    if how == "random":
        return data.draw(st.binary(max_size=200))
    if how == "flip" and plan:
        i = data.draw(st.integers(0, len(plan) - 1))
        plan = plan[:i] + bytes([plan[i] ^ data.draw(st.integers(1, 255))]) + plan[i + 1 :]
    return plan[: data.draw(st.integers(0, len(plan) - 1))]


def _mutated_run_task(plan: bytes, worker_url: str, data) -> bytes:
    body = _valid_run_task(_corrupt(plan, data), worker_url)
    for _ in range(data.draw(st.integers(0, 3))):
        key = data.draw(st.sampled_from([*body, "unknown_field"]))
        choice = data.draw(st.sampled_from(["replace", "delete", "huge", "query_id", "input"]))
        if choice == "delete":
            body.pop(key, None)
        elif choice == "huge":
            body[key] = data.draw(st.sampled_from([10**30, -1, 2**63, 1e308, "9" * 5000, [0] * 5000]))
        elif choice == "query_id":
            body["query_id"] = data.draw(QUERY_IDS)
        elif choice == "input":  # a well-formed input naming a file outside the spool
            location = FileLocation(worker_url, 0, 0, 0, "/etc/passwd", data.draw(st.integers(0, 2**40)))
            task_input = TaskInput(b"m", "shuffle", None, b"b", b"c", ((location,),))
            body["inputs"] = json.loads(encode(RunTask("q", 0, 0, 0, b"", (task_input,), "", None)))["inputs"]
        else:
            body[key] = data.draw(JSON)
    if data.draw(st.booleans()):
        body["version"] = data.draw(st.sampled_from([PROTOCOL_VERSION, 0, 2, 99, "1", None, 1.0]))
    return json.dumps(body).encode()


def _ticket(data) -> bytes:
    how = data.draw(st.sampled_from(["random", "json", "valid"]))
    if how == "random":
        return data.draw(st.binary(max_size=300))
    if how == "valid":
        return encode(Ticket("nosuchquery", *(data.draw(st.integers(0, 1 << 20)) for _ in range(3))))
    body = {
        "version": PROTOCOL_VERSION,
        "query_id": data.draw(QUERY_IDS),
        "stage": data.draw(JSON),
        "task": data.draw(st.integers(-(2**70), 2**70)),
        "partition": 0,
    }
    return json.dumps(body).encode()


def _assert_refused(call) -> None:
    with pytest.raises(flight.FlightError) as info:
        call()
    assert not isinstance(info.value, flight.FlightTimedOutError)
    text = str(info.value)
    assert "Traceback" not in text, text
    assert not isinstance(info.value, flight.FlightUnauthenticatedError)


OPTIONS = flight.FlightCallOptions(timeout=20)


@settings(max_examples=150)
@given(data=st.data())
def test_worker_refuses_hostile_messages(worker, plan_bytes, data):
    cluster, server, client = worker
    kind = data.draw(st.sampled_from(["run_task", "action", "ticket", "read_output"]))
    if kind == "run_task":
        body = _mutated_run_task(plan_bytes, server.url, data)
        _assert_refused(lambda: list(client.do_action(flight.Action("run_task", body), OPTIONS)))
    elif kind == "action":
        name = data.draw(st.sampled_from(ACTIONS) | st.text(max_size=30))
        body = data.draw(st.binary(max_size=500) | JSON.map(lambda v: json.dumps(v).encode()))
        if name != "health":
            _assert_refused(lambda: list(client.do_action(flight.Action(name, body), OPTIONS)))
    elif kind == "ticket":
        ticket = _ticket(data)
        _assert_refused(lambda: client.do_get(flight.Ticket(ticket), OPTIONS).read_all())
    else:
        ticket = _ticket(data)
        _assert_refused(lambda: list(client.do_action(flight.Action("read_output", ticket), OPTIONS)))
    assert os.listdir(server.spool.root) == []  # no state: nothing written, nothing left behind
    assert server.spool.used_bytes() == 0


def _with(body: dict, path: tuple, value) -> bytes:
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(body).encode()


def _with_input(plan: bytes, url: str, location_worker: str, size: int = 100) -> dict:
    body = _valid_run_task(plan, url)
    location = FileLocation(location_worker, 0, 0, 0, "/etc/passwd", size)
    task_input = TaskInput(b"m", "shuffle", None, b"b", b"c", ((location,),))
    body["inputs"] = json.loads(encode(RunTask("q", 0, 0, 0, b"", (task_input,), url, None)))["inputs"]
    return body


HOSTILE = {
    "unhashable input kind": (
        lambda p, u: _with(_with_input(p, u, u), ("inputs", 0, "kind"), ["x"]),
        "input kind",
    ),
    "deeply nested JSON": (lambda p, u: b"[" * 100_000, "nested too deeply"),
    "input on another host": (
        lambda p, u: json.dumps(_with_input(p, u, "http://203.0.113.1/x")).encode(),
        "worker must be a URL starting with grpc://",
    ),
    "path-like query id": (
        lambda p, u: _with(_valid_run_task(p, u), ("query_id",), "../../etc"),
        "query_id must match",
    ),
    "huge stage": (lambda p, u: _with(_valid_run_task(p, u), ("stage",), 10**30), "out of range"),
    "float attempt": (
        lambda p, u: _with(_valid_run_task(p, u), ("attempt",), 1.5),
        "attempt must be an integer",
    ),
    "boolean task": (lambda p, u: _with(_valid_run_task(p, u), ("task",), True), "task must be an integer"),
    "too many inputs": (
        lambda p, u: _with(_valid_run_task(p, u), ("inputs",), [None] * 2000),
        "at most 1024",
    ),
    "unknown version": (
        lambda p, u: _with(_valid_run_task(p, u), ("version",), 2),
        "unsupported protocol version 2",
    ),
    "unknown field": (lambda p, u: _with(_valid_run_task(p, u), ("rm_rf",), True), "unknown fields"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_known_hostile_run_tasks_are_refused_clearly(worker, plan_bytes, case):
    _, server, client = worker
    make, reason = HOSTILE[case]
    body = make(plan_bytes, server.url)
    with pytest.raises(flight.FlightServerError, match=f"refused message: .*{reason}"):
        list(client.do_action(flight.Action("run_task", body), OPTIONS))
    assert os.listdir(server.spool.root) == []


def test_corrupt_plan_bytes_are_refused_naming_the_cause(worker, plan_bytes):
    _, server, client = worker
    for plan in (plan_bytes[: len(plan_bytes) // 2], b"\xff" * 40, b""):
        body = encode(RunTask("fuzzquery", 0, 0, 0, plan, (), server.url))
        with pytest.raises(flight.FlightServerError, match="could not rebuild the task's plan"):
            list(client.do_action(flight.Action("run_task", body), OPTIONS))
    body = _valid_run_task(plan_bytes, server.url)
    body["plan"] = body["plan"][:-3] + "!!!"
    with pytest.raises(flight.FlightServerError, match="plan is not valid base64"):
        list(client.do_action(flight.Action("run_task", json.dumps(body).encode()), OPTIONS))
    assert os.listdir(server.spool.root) == []


def test_the_worker_still_serves_correct_queries_after_the_fuzzing(worker):
    cluster, server, _ = worker
    ctx = SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"k": list(range(1000))})]])
    with DistributedContext(ctx, workers=cluster) as dctx:
        rows = dctx.sql("SELECT k % 3 AS g, count(*) AS n FROM t GROUP BY 1 ORDER BY 1").to_pylist()
    assert rows == [{"g": 0, "n": 334}, {"g": 1, "n": 333}, {"g": 2, "n": 333}]
    assert server.spool.files() == []
