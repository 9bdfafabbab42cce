"""Messages between coordinator and workers: versioned, validated, JSON on the wire.

Every message carries `version`; a worker refuses any other version, and any field of the
wrong type or out of bounds, with a `ProtocolError` naming the field, before touching state.
Plan bytes travel base64-encoded inside the JSON body.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, fields
from typing import Any

from ..common.checks import Checks
from ..common.urls import WORKER_URL_SCHEMES, is_worker_url
from ..execution_plans.object_stores import MAX_STORES, ObjectStores, S3Store
from ..execution_plans.stage import BoundaryKind, InputBoundary
from ..metrics.task_metrics import MetricsError, TaskMetrics, decode_task_metrics
from ..runtime.session_settings import TaskSettings, check_task_settings

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_PLAN_BYTES = 32 * 1024 * 1024
MAX_FILES = 100_000
MAX_HEARTBEAT_QUERIES = 10_000  # query ids one heartbeat may name
_QUERY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_KINDS = {kind.value for kind in BoundaryKind}
_OPTIONAL = {
    "compression",
    "metrics",
    "settings",
    "object_stores",
    "feeds",
    "streams",
    "stream_output",
}  # fields a message may leave out
# Fields added since the version was last raised: left out of a message while empty, so a peer
# that predates them still reads the messages that do not use them (and refuses the others).
_LEFT_OUT_WHEN_EMPTY = {"settings", "object_stores", "feeds", "streams", "stream_output"}
_STORE_FIELDS = {f.name for f in fields(S3Store)}
_FEED_TOKEN = re.compile(r"^[0-9a-f]{32}$")


class ProtocolError(ValueError):
    """A message that is malformed, too large, or of another protocol version."""


_checks = Checks(ProtocolError)
_check, _int, _str = _checks.check, _checks.integer, _checks.string


def _short(value: Any, limit: int = 40) -> str:
    """`repr(value)`, cut to `limit` characters: an error must not echo a hostile message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _mib(size: int) -> str:
    """`size` bytes in MiB, as an error shows it."""
    return f"{size / (1024 * 1024):.1f} MiB"


def _bytes(value: Any, name: str, limit: int = MAX_PLAN_BYTES) -> bytes:
    _check(isinstance(value, str), f"{name} must be base64 text")
    _check(len(value) <= limit * 4 // 3 + 4, f"{name} is larger than {limit} bytes ({_mib(limit)})")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise ProtocolError(f"{name} is not valid base64") from exc


def _seconds(value: Any, name: str) -> float:
    """A positive duration in seconds, at most a day."""
    _check(isinstance(value, (int, float)) and not isinstance(value, bool), f"{name} must be a number")
    _check(0 < value <= 86_400, f"{name} must be between 0 and 86400 seconds")
    return float(value)


def _opt_bytes(value: Any, name: str) -> bytes | None:
    return None if value is None else _bytes(value, name)


def check_query_id(value: Any) -> str:
    """`value` if it is a valid query id (1 to 64 letters, digits, `_` or `-`), else ProtocolError."""
    _check(isinstance(value, str) and bool(_QUERY_ID.match(value)), "query_id must match [A-Za-z0-9_-]{1,64}")
    return value


def _url(value: Any, name: str) -> str:
    """A worker URL: only Flight's gRPC schemes, so a message cannot send a worker elsewhere."""
    _str(value, name, 1024)
    _check(is_worker_url(value), f"{name} must be a URL starting with {' or '.join(WORKER_URL_SCHEMES)}")
    return value


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


@dataclass(frozen=True)
class FileLocation:
    """A producer's output partition: on which worker, and its path in that worker's spool."""

    worker: str
    stage: int
    task: int
    partition: int
    path: str
    size: int


@dataclass(frozen=True)
class StreamChannel:
    """One output partition of one attempt of a producer task whose output streams (see
    `runtime.streams`): `address` is where its worker's data plane serves it, "" when the
    producer runs in the reader's process."""

    address: str
    stage: int
    task: int
    attempt: int
    partition: int


@dataclass(frozen=True)
class TaskKey:
    """One attempt at one task of a query: what a worker keeps the inputs it fetched and the
    outputs it wrote under, and what `cancel_attempt` names. A run never numbers two attempts
    of one task alike."""

    query_id: str
    stage: int
    task: int
    attempt: int


@dataclass(frozen=True)
class TaskInput:
    """One input of a task: the marker to replace in its plan and the producer files to read there.

    `groups` holds the files of each partition the task reads; None when the producers wrote no
    rows, and then the `boundary` subtree runs in the marker's place: reading nothing, under a
    limit of no row, where its leaves allow (see `distributed_planner.empty_inputs`), else as
    planned (its shipped memory tables read as inputs of their own, listed after the stage's). Read from files, a
    coalesce or merge carries only its boundary node over a placeholder child, and a shuffle or
    memory table no boundary at all (see `InputBoundary.read_from_files`). The fields of its
    `InputBoundary` are written out one by one, as they travel on the wire."""

    marker: bytes
    kind: str
    schema: bytes | None
    boundary: bytes
    boundary_child: bytes
    groups: tuple[tuple[FileLocation, ...], ...] | None
    # a streamed input: the producer channels each partition of the task's leaf reads (`groups`
    # is then None and the boundary is what the leaf stands for)
    streams: tuple[tuple[StreamChannel, ...], ...] = ()

    @classmethod
    def of(
        cls, where: InputBoundary, schema: bytes | None, groups: tuple[tuple[FileLocation, ...], ...] | None
    ) -> TaskInput:
        """The input read at `where`, from the producer files `groups` written with `schema`."""
        return cls(where.marker, where.kind.value, schema, where.boundary, where.boundary_child, groups)

    @property
    def where(self) -> InputBoundary:
        """Where the input is read in the task's plan."""
        return InputBoundary(self.marker, BoundaryKind(self.kind), self.boundary, self.boundary_child)


@dataclass(frozen=True)
class FeedTask:
    """A work-unit feed scan of a task: the marker standing for it in the task's plan, the
    scan to put back there, and where and how the task gets and reads its units: from the
    coordinator's feed service at `url`, asking as attempt `token` for scan `scan_id`, with
    `partitions` units at once, each read by `reader` (a cloudpickled FeedReader)."""

    marker: bytes
    scan: bytes
    scan_id: int
    url: str
    token: str
    reader: bytes
    partitions: int
    columns: tuple[str, ...] | None = None  # the columns the scan reads (None: all)
    plain: bool = False  # the scan only picks `columns`: a scan of just them can replace it
    rounds: bool = False  # the task may run its plan in rounds, each over its next units
    native: bool = False  # a feed of Parquet files DataFusion reads (see FeedScan)
    predicate: bytes | None = None  # a feed of Parquet files: the filter above its scan (see FeedScan)
    predicate_shown: str = ""
    connect_timeout: float = 30.0  # seconds the feed service may take to first answer


@dataclass(frozen=True)
class RunTask:
    """Run task `task` of stage `stage` of query `query_id` and keep its outputs in the spool."""

    query_id: str
    stage: int
    task: int
    attempt: int
    plan: bytes
    inputs: tuple[TaskInput, ...]
    worker: str  # the URL the coordinator reaches this worker by (inputs there are local)
    compression: str | None = "lz4"
    # the user's DataFusion settings the task runs with (see runtime.session_settings)
    settings: TaskSettings = ()
    # the object stores the task registers in its session (see execution_plans.object_stores);
    # their credentials travel here, so the message is never logged or shown
    object_stores: ObjectStores = ()
    feeds: tuple[FeedTask, ...] = ()  # the task's work-unit feed scans
    stream_output: bool = False  # its outputs stream to readers running now, not to files

    @property
    def key(self) -> TaskKey:
        """The task attempt this message runs."""
        return TaskKey(self.query_id, self.stage, self.task, self.attempt)


@dataclass(frozen=True)
class PartitionResult:
    """One output partition of a task: its rows and bytes, and its spool path (None when empty)."""

    partition: int
    rows: int
    bytes: int
    path: str | None


@dataclass(frozen=True)
class TaskResult:
    """What a worker answers to RunTask: the task's output partitions, their schema (None when
    it wrote nothing), its run time, the bytes it fetched from other workers, and its metrics."""

    partitions: tuple[PartitionResult, ...]
    schema: bytes | None
    seconds: float
    fetched_bytes: int
    metrics: TaskMetrics | None = None  # optional: a worker may leave it out


@dataclass(frozen=True)
class Ticket:
    """Names one output partition of one task in a worker's spool."""

    query_id: str
    stage: int
    task: int
    partition: int


@dataclass(frozen=True)
class ShipPartition:
    """Store partition `partition` of the memory table a coordinator ships as producer `stage`
    of query `query_id` (its batches follow in the same `do_put` call), written with
    `compression`; the worker keeps it as task 0's output of that producer."""

    query_id: str
    stage: int
    partition: int
    compression: str | None = "lz4"


@dataclass(frozen=True)
class Heartbeat:
    """A coordinator's liveness probe of a worker, naming the queries of that coordinator whose
    data the worker holds or whose tasks it runs: their spool leases are renewed."""

    query_ids: tuple[str, ...]


def _encode(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return _b64(obj)
    if isinstance(obj, (list, tuple)):
        return [_encode(x) for x in obj]
    if hasattr(obj, "__dataclass_fields__"):
        return {
            f.name: _encode(getattr(obj, f.name))
            for f in fields(obj)
            if not (f.name in _LEFT_OUT_WHEN_EMPTY and not getattr(obj, f.name))
        }
    return obj


def encode(message: Any) -> bytes:
    """JSON bytes of a message, with the protocol version."""
    body = _encode(message)
    body["version"] = PROTOCOL_VERSION
    return json.dumps(body, separators=(",", ":")).encode()


def _load(data: bytes, expected: set[str]) -> dict:
    _check(
        len(data) <= MAX_MESSAGE_BYTES,
        f"message of {len(data)} bytes ({_mib(len(data))}) exceeds the limit of {MAX_MESSAGE_BYTES} bytes "
        f"({_mib(MAX_MESSAGE_BYTES)})",
    )
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"message is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ProtocolError("message is nested too deeply") from exc
    _check(isinstance(body, dict), "message must be a JSON object")
    version = body.pop("version", None)
    _check(
        version == PROTOCOL_VERSION,
        f"unsupported protocol version {_short(version)}: this side speaks version {PROTOCOL_VERSION}",
    )
    unknown = set(body) - expected
    _check(not unknown, f"unknown fields {sorted(unknown)}")
    missing = expected - set(body) - _OPTIONAL
    _check(not missing, f"missing fields {sorted(missing)}")
    return body


def _list(value: Any, name: str, limit: int = MAX_FILES) -> list:
    _check(isinstance(value, list) and len(value) <= limit, f"{name} must be a list of at most {limit}")
    return value


def _file_location(raw: Any) -> FileLocation:
    _check(isinstance(raw, dict) and set(raw) == {f.name for f in fields(FileLocation)}, "bad file location")
    return FileLocation(
        worker=_url(raw["worker"], "worker"),
        stage=_int(raw["stage"], "stage", high=1 << 20),
        task=_int(raw["task"], "task", high=1 << 20),
        partition=_int(raw["partition"], "partition", high=1 << 20),
        path=_str(raw["path"], "path"),
        size=_int(raw["size"], "size"),
    )


def _stream_channel(raw: Any) -> StreamChannel:
    _check(
        isinstance(raw, dict) and set(raw) == {f.name for f in fields(StreamChannel)}, "bad stream channel"
    )
    address = _str(raw["address"], "address", 1024)
    _check(address == "" or address.count(":") >= 1, "a stream channel's address must be host:port or empty")
    return StreamChannel(
        address=address,
        stage=_int(raw["stage"], "stage", high=1 << 20),
        task=_int(raw["task"], "task", high=1 << 20),
        attempt=_int(raw["attempt"], "attempt", high=1000),
        partition=_int(raw["partition"], "partition", high=1 << 20),
    )


def _task_input(raw: Any) -> TaskInput:
    names = {f.name for f in fields(TaskInput)}
    _check(isinstance(raw, dict) and names - {"streams"} <= set(raw) <= names, "bad task input")
    _check(
        isinstance(raw["kind"], str) and raw["kind"] in _KINDS, f"input kind must be one of {sorted(_KINDS)}"
    )
    groups = raw["groups"]
    task_input = TaskInput(
        marker=_bytes(raw["marker"], "marker", 1024),
        kind=raw["kind"],
        schema=_opt_bytes(raw["schema"], "schema"),
        boundary=_bytes(raw["boundary"], "boundary"),
        boundary_child=_bytes(raw["boundary_child"], "boundary_child"),
        groups=None
        if groups is None
        else tuple(tuple(_file_location(f) for f in _list(g, "group")) for g in _list(groups, "groups")),
        streams=tuple(
            tuple(_stream_channel(c) for c in _list(g, "stream group"))
            for g in _list(raw.get("streams", []), "streams")
        ),
    )
    _check(
        not (task_input.streams and task_input.groups is not None), "an input is streamed or read from files"
    )
    _check_boundary(task_input)
    return task_input


def _check_boundary(task_input: TaskInput) -> None:
    """The boundary bytes an input needs: the subtree that runs in place of an input of no
    files; for a coalesce or merge read from files, its node over the child the scan replaces."""
    if task_input.groups is None and not task_input.streams:
        _check(
            bool(task_input.boundary), "an input with no files must carry the boundary subtree run instead"
        )
    elif task_input.where.runs_boundary:
        _check(
            bool(task_input.boundary_child) and task_input.boundary_child in task_input.boundary,
            f"a {task_input.kind} input must carry its boundary node over the child its scan replaces",
        )


def _settings(value: Any) -> TaskSettings:
    """Settings a task carries: [name, value] pairs of text, each name once, in name order."""
    pairs = _list(value, "settings", 1024)
    for pair in pairs:
        _check(
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair),
            "settings must be a list of [name, value] pairs of text",
        )
    settings = tuple((name, text) for name, text in pairs)
    names = [name for name, _ in settings]
    _check(names == sorted(set(names)), "settings must name each setting once, in name order")
    try:
        return check_task_settings(settings)
    except ValueError as exc:
        raise ProtocolError(f"settings: {exc}") from exc


def _object_stores(value: Any) -> ObjectStores:
    """Object stores a task carries: S3 store descriptions, each URL once, in URL order. An
    error never echoes a value: it could be a credential."""
    stores = []
    for raw in _list(value, "object_stores", MAX_STORES):
        _check(
            isinstance(raw, dict) and "bucket" in raw and set(raw) <= _STORE_FIELDS,
            f"object_stores must be a list of S3 store descriptions (fields {', '.join(sorted(_STORE_FIELDS))})",
        )
        try:
            stores.append(S3Store(**raw))
        except ValueError as exc:
            raise ProtocolError(f"object_stores: {exc}") from exc
    urls = [store.url for store in stores]
    _check(urls == sorted(set(urls)), "object_stores must name each store once, in URL order")
    return tuple(stores)


def _feed_task(raw: Any) -> FeedTask:
    _check(isinstance(raw, dict) and set(raw) == {f.name for f in fields(FeedTask)}, "bad feed task")
    columns = raw["columns"]
    if columns is not None:
        _check(
            isinstance(columns, list) and len(columns) <= 10_000 and all(isinstance(c, str) for c in columns),
            "feed columns must be null or a list of names",
        )
        columns = tuple(columns)
    token = raw["token"]
    _check(isinstance(token, str) and bool(_FEED_TOKEN.match(token)), "feed token must be 32 hex digits")
    return FeedTask(
        marker=_bytes(raw["marker"], "marker", 1024),
        scan=_bytes(raw["scan"], "scan"),
        scan_id=_int(raw["scan_id"], "scan_id", high=1 << 20),
        url=_url(raw["url"], "feed url"),
        token=token,
        reader=_bytes(raw["reader"], "reader"),
        partitions=_int(raw["partitions"], "partitions", low=1, high=1024),
        columns=columns,
        plain=raw["plain"] is True,
        rounds=raw["rounds"] is True,
        native=raw["native"] is True,
        predicate=None if raw["predicate"] is None else _bytes(raw["predicate"], "predicate"),
        predicate_shown=_str(raw["predicate_shown"], "predicate_shown", MAX_PLAN_BYTES),
        connect_timeout=_seconds(raw["connect_timeout"], "connect_timeout"),
    )


def decode_run_task(data: bytes) -> RunTask:
    """A validated RunTask from message bytes; ProtocolError names the first bad field."""
    body = _load(data, {f.name for f in fields(RunTask)})
    compression = _compression(body.get("compression", "lz4"))
    return RunTask(
        query_id=check_query_id(body["query_id"]),
        stage=_int(body["stage"], "stage", high=1 << 20),
        task=_int(body["task"], "task", high=1 << 20),
        attempt=_int(body["attempt"], "attempt", high=1000),
        plan=_bytes(body["plan"], "plan"),
        inputs=tuple(_task_input(i) for i in _list(body["inputs"], "inputs", 1024)),
        worker=_url(body["worker"], "worker"),
        compression=compression,
        settings=_settings(body.get("settings", [])),
        object_stores=_object_stores(body.get("object_stores", [])),
        feeds=tuple(_feed_task(f) for f in _list(body.get("feeds", []), "feeds", 64)),
        stream_output=body.get("stream_output", False) is True,
    )


def _partition_result(raw: Any) -> PartitionResult:
    _check(isinstance(raw, dict), "bad partition result")
    path = raw.get("path")
    return PartitionResult(
        partition=_int(raw.get("partition"), "partition"),
        rows=_int(raw.get("rows"), "rows", high=1 << 62),
        bytes=_int(raw.get("bytes"), "bytes", high=1 << 62),
        path=None if path is None else _str(path, "path"),
    )


def decode_partition_result(data: bytes) -> PartitionResult:
    """A validated PartitionResult (a worker's answer to a shipped partition) from message
    bytes; ProtocolError names the first bad field."""
    return _partition_result(_load(data, {f.name for f in fields(PartitionResult)}))


def _compression(value: Any) -> str | None:
    _check(value in (None, "lz4", "zstd"), "compression must be null, 'lz4' or 'zstd'")
    return value


def decode_ship_partition(data: bytes) -> ShipPartition:
    """A validated ShipPartition from message bytes; ProtocolError names the first bad field."""
    body = _load(data, {f.name for f in fields(ShipPartition)})
    return ShipPartition(
        query_id=check_query_id(body["query_id"]),
        stage=_int(body["stage"], "stage", high=1 << 20),
        partition=_int(body["partition"], "partition", high=1 << 20),
        compression=_compression(body.get("compression", "lz4")),
    )


def decode_task_result(data: bytes) -> TaskResult:
    """A validated TaskResult from message bytes; ProtocolError names the first bad field."""
    body = _load(data, {f.name for f in fields(TaskResult)})
    parts = [_partition_result(raw) for raw in _list(body["partitions"], "partitions")]
    seconds = body["seconds"]
    _check(isinstance(seconds, (int, float)), "seconds must be a number")
    metrics = body.get("metrics")
    if metrics is not None:
        try:
            metrics = decode_task_metrics(metrics)
        except MetricsError as exc:
            raise ProtocolError(f"metrics: {exc}") from exc
    return TaskResult(
        tuple(parts),
        _opt_bytes(body["schema"], "schema"),
        float(seconds),
        _int(body["fetched_bytes"], "fetched_bytes", high=1 << 62),
        metrics,
    )


def decode_ticket(data: bytes) -> Ticket:
    """A validated Ticket from message bytes; ProtocolError names the first bad field."""
    body = _load(data, {f.name for f in fields(Ticket)})
    return Ticket(
        query_id=check_query_id(body["query_id"]),
        stage=_int(body["stage"], "stage", high=1 << 20),
        task=_int(body["task"], "task", high=1 << 20),
        partition=_int(body["partition"], "partition", high=1 << 20),
    )


def decode_task_key(data: bytes) -> TaskKey:
    """A validated TaskKey (the body of `cancel_attempt`); ProtocolError names the first bad field."""
    body = _load(data, {f.name for f in fields(TaskKey)})
    return TaskKey(
        query_id=check_query_id(body["query_id"]),
        stage=_int(body["stage"], "stage", high=1 << 20),
        task=_int(body["task"], "task", high=1 << 20),
        attempt=_int(body["attempt"], "attempt", high=1000),
    )


def decode_heartbeat(data: bytes) -> Heartbeat:
    """A validated Heartbeat from message bytes; ProtocolError names the first bad field."""
    body = _load(data, {f.name for f in fields(Heartbeat)})
    ids = _list(body["query_ids"], "query_ids", MAX_HEARTBEAT_QUERIES)
    return Heartbeat(tuple(check_query_id(query_id) for query_id in ids))


def decode_query_id(data: bytes) -> str:
    """The query id of a `release` or `cancel` message, validated."""
    body = _load(data, {"query_id"})
    return check_query_id(body["query_id"])
