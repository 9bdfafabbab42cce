"""Every setting of a distributed query, written, defaulted and validated here once.

`DistributedConfig` holds them: how plans are cut and how the coordinator runs them. A query's
`QueryPlanConfig` is that config with the number of workers it was planned for, made once when
the query is planned and read by its planning and its run alike; it says which DataFusion
settings the query is planned with.
"""

from __future__ import annotations

import difflib
import functools
import numbers
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any

from ..common.tokens import token_from_env
from ..common.units import parse_bytes

MiB = 1024 * 1024  #: bytes in a mebibyte, for the defaults below
_KINDS = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}


def is_byte_size(name: str) -> bool:
    """Whether setting `name` is a number of bytes: it then also takes text such as "64MiB"."""
    return name == "bytes_per_partition" or name.endswith("_bytes")


def _accepts(kind: type, value: object) -> bool:
    """Whether `value` is a `kind` (a NumPy integer is an integer; a boolean is no number)."""
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind in (int, float):
        return isinstance(value, numbers.Integral if kind is int else numbers.Real)
    return isinstance(value, kind)


_TYPE_HINTS: dict[type, dict[str, Any]] = {}


def _type_hints(kind: type) -> dict[str, Any]:
    """The annotations of the settings dataclass `kind`, resolved once (every query makes a
    config: resolving them each time cost about 1 ms)."""
    if kind not in _TYPE_HINTS:
        _TYPE_HINTS[kind] = typing.get_type_hints(kind)
    return _TYPE_HINTS[kind]


def check_types(config: Any) -> None:
    """Check each field of the settings dataclass `config` against its annotation, naming the
    setting, before any range is checked; a byte size written as text ("64MiB", read by
    `common.units.parse_bytes`) becomes its number.

    Raises:
        ValueError: a setting's value is not of its type ("partitions_per_task must be an
            integer, got '4'").
    """
    hints = _type_hints(type(config))
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, str) and is_byte_size(f.name):
            try:
                value = parse_bytes(value)
            except ValueError:
                raise ValueError(
                    f"{f.name} must be a byte count such as 1048576 or 64MiB, got {value!r}"
                ) from None
            object.__setattr__(config, f.name, value)  # frozen: set once, while being made
        hint = hints[f.name]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        if value is None and type(None) in kinds:
            continue
        if not any(_accepts(kind, value) for kind in kinds if kind in _KINDS):
            rule = " or ".join(_KINDS[k] for k in kinds if k in _KINDS)
            rule += " (or None)" if type(None) in kinds else ""
            shown = "a value" if f.name == "auth_token" else repr(value)  # a secret is not shown
            raise ValueError(f"{f.name} must be {rule}, got {shown}")


def unknown_setting(name: str, known: typing.Iterable[str], prefix: str = "") -> str:
    """The message for a setting `name` that is none of `known`: the nearest name, if one is
    near, else every name."""
    known = sorted(known)
    near = difflib.get_close_matches(name, known, n=1)
    if near:
        return f"unknown setting {prefix}{name}; did you mean {prefix}{near[0]}?"
    return f"unknown setting {prefix}{name}; the settings are: {', '.join(prefix + k for k in known)}"


def require(valid: bool, name: str, rule: str, value: object) -> None:
    """Raise ValueError naming the setting `name` unless `valid`, so that a bad setting fails
    where the settings are made rather than at the first query.

    Raises:
        ValueError: "`name` must be `rule`, got `value`".
    """
    if not valid:
        raise ValueError(f"{name} must be {rule}, got {value!r}")


@dataclass(frozen=True)
class DistributedConfig:
    """Every setting of a distributed query, with its default, checked when it is made.

    The first settings decide how plans are cut into stages and tasks; the others how the
    coordinator runs a plan.

    Attributes:
        partitions_per_task: partitions (threads) each task runs on its worker. The plan is
            made with `workers * partitions_per_task` target partitions, so exchanges fan out
            to the whole cluster. At least 1. Default 2.
        bytes_per_partition: scanned bytes that justify one partition at a leaf stage; a leaf
            stage gets `ceil(bytes / bytes_per_partition / partitions_per_task)` tasks. A
            Parquet scan of local files counts only its columns' bytes (`scan_size`). At
            least 1. Default 16 MiB.
        cardinality_factor: task count of a stage relative to its largest input stage (1.0
            keeps it; below 1 shrinks stages after reductions). Positive. Default 1.0.
        max_tasks_per_stage: cap on any stage's task count; 0 means the number of workers,
            which is also the cap whatever this is. At least 0. Default 0.
        broadcast_inline_bytes: a join's build side that scans at most this many bytes and
            reads no other stage is computed by every consumer task instead of being a stage of
            its own (0 always makes it a stage). At least 0. Default 8 MiB.
        broadcast_total_rows, broadcast_total_bytes, broadcast_row_bytes: when a hash join
            collects its smaller side whole in every task of the other side (a broadcast)
            instead of shuffling both sides; `QueryPlanConfig.broadcast_thresholds` has the rule. The totals
            are a memory budget: what all the copies of a broadcast side together (one per
            worker) may add up to. `broadcast_row_bytes` is what one row of a side is assumed
            to take when DataFusion cannot estimate the side's bytes (any string column), so
            that the byte budget bounds such sides too. At least 0 (`broadcast_row_bytes` at
            least 1). Defaults 4000000 rows, 128 MiB and 64 bytes: on 2 workers, 64 MiB or
            1048576 rows per copy. `broadcast_total_rows=None` leaves DataFusion's settings
            as they are.
        memory_table_inline_bytes: a memory table (`from_pandas`, `register_record_batches`,
            a MemTable) whose data is larger than this is written once by the coordinator, as
            Arrow IPC files its workers read like an exchange's outputs, instead of travelling
            inside every task's plan. At least 0. Default 1 MiB.
        adaptive: re-plan each stage once the stages it reads are written, from the exact
            bytes and rows they hold (see docs/how-a-query-runs.md): fewer tasks for small
            inputs, a small last step run in the coordinator, a shuffled join whose build side
            fits the broadcast budget collecting it instead, skewed partitions shared out.
            Default True.
        adaptive_one_task_bytes: a stage whose inputs hold at most this many bytes runs as
            one task (and, when it reads only other stages and feeds the query's last step,
            inside that step in the coordinator). At least 0. Default 4 MiB.
        adaptive_task_bytes: input bytes that justify one task of a stage that reads other
            stages; a stage keeps at most its planned tasks. At least 1. Default 32 MiB.
        skew_factor, skew_min_bytes: a partition of a stage's input holding more than
            `skew_factor` times the median of that input's other partitions and at least
            `skew_min_bytes` is skewed, and shared out by producer files over several tasks
            where the stage's plan allows it and it is worth it. `skew_factor` at least 1,
            `skew_min_bytes` at least 0. Defaults 2.0 and 16 MiB.
        embedded_workers: workers the embedded cluster starts when no workers are given. At
            least 1. Default 2.
        compression: codec of exchanged Arrow IPC files: "lz4", "zstd", None, or "auto": None
            when the workers' outputs are read in place (a cluster the library started on this
            host), "lz4" otherwise. Default "auto".
        exchange: how stages hand their outputs on: "stream" (batches flow from producer to
            consumer tasks as they are made, through the compiled data plane, the two stages
            running at once), "spool" (Arrow IPC files, each stage waiting for the whole of its
            inputs), or "auto": stream where that was measured to pay, spool elsewhere. In one
            process, where files are read in place, streaming measured no faster than spooling
            (TPC-H SF 1, benchmarks/README.md), so "auto" spools for now. "stream" streams what
            it can: an output read by one task per partition, from local files, in one process
            or through the workers' data planes (see docs/native.md);
            `DataFrame.metrics.streamed_stages` says which streamed. A streamed run that loses
            a worker is run again spooled. Default "auto".
        connect_timeout: seconds to wait for a worker to answer a short call. Positive.
            Default 30.
        task_timeout: seconds a task may run before the query fails. Positive. Default 600.
        liveness_timeout: seconds a worker running a task of the query may leave the
            coordinator's probes (sent every quarter of it, at most every 5 s) unanswered before
            it is treated as lost: its tasks rerun elsewhere and its outputs are recomputed. The
            probes also renew the query's spool leases. Positive. Default 10.
        task_attempts: tries of a task whose worker was lost (the task reruns on another
            worker; outputs the lost worker held are recomputed). Errors of the query itself
            (bad SQL, a UDF raising) fail at once. At least 1. Default 3.
        query_timeout: seconds a query may run before it is cancelled (QueryTimedOut); None for
            no limit. Positive. Default None.
        auth_token: the workers' shared token. Default: the environment variable
            DATAFUSION_DISTRIBUTED_TOKEN; a cluster the library starts (embedded or LocalCluster)
            brings its own. Not shown in the repr.
        tls_root_certs: path of a PEM file of the CAs that signed the workers' certificates, for
            `grpc+tls://` workers. Default None (the system's CAs).
        tls_client_cert, tls_client_key: paths of the PEM client certificate and private key
            the coordinator presents to workers that require one (mutual TLS, the workers'
            `tls_client_ca`). Both or neither. Default None (no client certificate).
        feed_host: the address the coordinator's feed service listens on, which workers
            reading a work-unit feed must reach (see `register_feed`). Default "127.0.0.1",
            right for the embedded cluster and `LocalCluster`; give this machine's address for
            workers elsewhere.
        speculation: give a straggler, a task that has run far longer than its stage's
            finished tasks, a second attempt on another worker; the first attempt to finish
            wins and the other is stopped and its files deleted. Never for a stage writing the
            query's files or reading a work-unit feed. Default False: it pays only when one
            worker is much slower than the others (see benchmarks/README.md).
        speculation_factor: a running task is a straggler once it has run longer than this
            times the median time of its stage's finished tasks, and at least half of them
            have finished. At least 1. Default 2.
        speculation_min_seconds: a task is never a straggler before it has run this many
            seconds, so short stages never speculate. At least 0. Default 1.
        worker_refresh_seconds: each stage asks the resolver for the workers again as it
            starts, unless its last answer is younger than this: workers that join mid-query
            take the tasks of later stages, and workers no longer listed get none. 0 asks at
            every stage. At least 0. Default 1.
        dashboard_port: serve a live web dashboard of the context's queries, stages, tasks and
            workers on this port (0 picks a free one; `DistributedContext.dashboard_url` says
            where). Default None: no dashboard.
        dashboard_host: the address the dashboard listens on. Default "127.0.0.1", reachable
            from this machine only; any other address requires the cluster's token (see
            docs/observability.md).
        check_workers: what a context given a list of worker URLs does when some of them do
            not answer the health call it makes before its first query runs (planning alone
            calls no worker): "require" fails that query with `WorkersUnavailable`, naming each
            (and why), until they answer; "warn" logs that once and quarantines them (queries
            avoid them until they answer: see docs/failure-model.md); "off"
            only warns, from the background, as for a resolver's workers (see
            docs/failure-model.md). Default "require".
        history_length: finished queries kept for the dashboard, `on_progress` and the
            `distributed.queries`, `.stages` and `.tasks` tables (running ones are always
            kept); the oldest go first. At least 1. Default 100.

    Byte sizes take a number or text such as "64MiB" (as `SET distributed.bytes_per_partition =
    '64MiB'` and the command line's flags do).

    Raises:
        ValueError: a setting is not of its type or out of range (the message names it).
        TypeError: a name is no setting (the message suggests the nearest).

    Examples:
        >>> DistributedConfig(partitions_per_task=4).planner(3).target_partitions
        12
        >>> DistributedConfig(partitions_per_task=0)
        Traceback (most recent call last):
        ...
        ValueError: partitions_per_task must be at least 1, got 0
        >>> DistributedConfig(bytes_per_partition="64MiB").bytes_per_partition
        67108864
        >>> DistributedConfig(partitons_per_task=4)
        Traceback (most recent call last):
        ...
        TypeError: unknown setting partitons_per_task; did you mean partitions_per_task?
    """

    partitions_per_task: int = 2
    bytes_per_partition: int = 16 * MiB
    cardinality_factor: float = 1.0
    max_tasks_per_stage: int = 0
    broadcast_inline_bytes: int = 8 * MiB
    broadcast_total_rows: int | None = 4_000_000
    broadcast_total_bytes: int = 128 * MiB
    broadcast_row_bytes: int = 64
    memory_table_inline_bytes: int = 1 * MiB
    adaptive: bool = True
    adaptive_one_task_bytes: int = 4 * MiB
    adaptive_task_bytes: int = 32 * MiB
    skew_factor: float = 2.0
    skew_min_bytes: int = 16 * MiB

    embedded_workers: int = 2
    compression: str | None = "auto"
    exchange: str = "auto"
    connect_timeout: float = 30.0
    task_timeout: float = 600.0
    liveness_timeout: float = 10.0
    task_attempts: int = 3
    query_timeout: float | None = None
    auth_token: str | None = field(default_factory=token_from_env, repr=False)
    tls_root_certs: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    feed_host: str = "127.0.0.1"
    speculation: bool = False
    speculation_factor: float = 2.0
    speculation_min_seconds: float = 1.0
    worker_refresh_seconds: float = 1.0
    dashboard_port: int | None = None
    dashboard_host: str = "127.0.0.1"
    history_length: int = 100
    check_workers: str = "require"

    def __post_init__(self) -> None:
        check_types(self)
        require(self.partitions_per_task >= 1, "partitions_per_task", "at least 1", self.partitions_per_task)
        require(self.bytes_per_partition >= 1, "bytes_per_partition", "at least 1", self.bytes_per_partition)
        require(self.cardinality_factor > 0, "cardinality_factor", "positive", self.cardinality_factor)
        require(self.max_tasks_per_stage >= 0, "max_tasks_per_stage", "at least 0", self.max_tasks_per_stage)
        require(
            self.broadcast_inline_bytes >= 0,
            "broadcast_inline_bytes",
            "at least 0",
            self.broadcast_inline_bytes,
        )
        rows = self.broadcast_total_rows
        require(rows is None or rows >= 0, "broadcast_total_rows", "at least 0 (or None)", rows)
        require(
            self.broadcast_total_bytes >= 0, "broadcast_total_bytes", "at least 0", self.broadcast_total_bytes
        )
        require(self.broadcast_row_bytes >= 1, "broadcast_row_bytes", "at least 1", self.broadcast_row_bytes)
        require(
            self.memory_table_inline_bytes >= 0,
            "memory_table_inline_bytes",
            "at least 0",
            self.memory_table_inline_bytes,
        )

        require(isinstance(self.adaptive, bool), "adaptive", "True or False", self.adaptive)
        for name in ("adaptive_one_task_bytes", "skew_min_bytes"):
            require(getattr(self, name) >= 0, name, "at least 0", getattr(self, name))
        require(self.adaptive_task_bytes >= 1, "adaptive_task_bytes", "at least 1", self.adaptive_task_bytes)
        require(self.skew_factor >= 1, "skew_factor", "at least 1", self.skew_factor)

        require(self.embedded_workers >= 1, "embedded_workers", "at least 1", self.embedded_workers)
        codecs = (None, "lz4", "zstd", "auto")
        require(self.compression in codecs, "compression", "None, 'lz4', 'zstd' or 'auto'", self.compression)
        exchanges = ("auto", "stream", "spool")
        require(self.exchange in exchanges, "exchange", "'auto', 'stream' or 'spool'", self.exchange)
        require(self.connect_timeout > 0, "connect_timeout", "positive", self.connect_timeout)
        require(self.task_timeout > 0, "task_timeout", "positive", self.task_timeout)
        require(self.liveness_timeout > 0, "liveness_timeout", "positive", self.liveness_timeout)
        require(self.task_attempts >= 1, "task_attempts", "at least 1", self.task_attempts)
        timeout = self.query_timeout
        require(timeout is None or timeout > 0, "query_timeout", "positive (or None for no limit)", timeout)
        require(
            isinstance(self.feed_host, str) and 0 < len(self.feed_host) <= 255 and " " not in self.feed_host,
            "feed_host",
            "a host name or address",
            self.feed_host,
        )
        factor, min_seconds = self.speculation_factor, self.speculation_min_seconds
        require(factor >= 1, "speculation_factor", "at least 1", factor)
        require(min_seconds >= 0, "speculation_min_seconds", "at least 0", min_seconds)
        refresh = self.worker_refresh_seconds
        require(refresh >= 0, "worker_refresh_seconds", "at least 0", refresh)
        port = self.dashboard_port
        require(
            port is None or 0 <= port <= 65535, "dashboard_port", "a port from 0 to 65535 (or None)", port
        )
        require(
            isinstance(self.dashboard_host, str)
            and 0 < len(self.dashboard_host) <= 255
            and " " not in self.dashboard_host,
            "dashboard_host",
            "a host name or address",
            self.dashboard_host,
        )
        require(self.history_length >= 1, "history_length", "at least 1", self.history_length)
        checks = ("require", "warn", "off")
        require(
            self.check_workers in checks, "check_workers", "'require', 'warn' or 'off'", self.check_workers
        )
        if (self.tls_client_cert is None) != (self.tls_client_key is None):
            raise ValueError("tls_client_cert and tls_client_key must be given together (both or neither)")

    def planner(self, workers: int) -> QueryPlanConfig:
        """These settings for a query planned on `workers` workers."""
        return QueryPlanConfig(
            workers=workers, **{f.name: getattr(self, f.name) for f in fields(DistributedConfig)}
        )


@dataclass(frozen=True)
class QueryPlanConfig(DistributedConfig):
    """The config one query is planned and run with: the context's `DistributedConfig` as it
    was when the query was planned (a SET while it runs changes the next query, never this one),
    and the number of workers it was planned for. Made once per query (`planner`).

    Attributes:
        workers: number of workers the tasks of a stage can spread over. At least 1. Default 2.

    Examples:
        >>> QueryPlanConfig(workers=3, broadcast_total_rows=None).datafusion_settings()
        {'datafusion.execution.target_partitions': '6'}
    """

    workers: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.workers >= 1, "workers", "at least 1", self.workers)

    @property
    def target_partitions(self) -> int:
        """Partitions the plan is made with: `workers * partitions_per_task`."""
        return self.workers * self.partitions_per_task

    @property
    def task_cap(self) -> int:
        """The most tasks any stage may have: the workers, or `max_tasks_per_stage` if fewer."""
        cap = self.workers
        if self.max_tasks_per_stage > 0:
            cap = min(cap, self.max_tasks_per_stage)
        return cap

    def broadcast_thresholds(self) -> tuple[int, int] | None:
        """The largest join side, in (rows, bytes) per copy, that is broadcast rather than
        shuffled, or None when `broadcast_total_rows` is None (DataFusion's settings stay).

        The cost model: a broadcast puts a copy of the side on every worker, so it costs
        `side bytes x workers` of memory (and of transfer, once); a shuffle moves both sides
        once and holds each row of the side on one worker only. DataFusion builds on the
        smaller side, so on 2 workers a broadcast never moves more than the shuffle it
        replaces, and memory decides: a side is broadcast only while all of its copies stay
        within `broadcast_total_bytes`. On more workers the copies grow with the cluster while
        a shuffle does not, and the same budget, divided by more workers, admits only smaller
        sides. DataFusion compares its estimate of a side's bytes with the byte threshold
        and, only when it has no such estimate (a side with a string column, or below a join),
        its row estimate with the row threshold: the rows the budget holds at
        `broadcast_row_bytes` a row, so that a side of unknown size is not copied past the
        budget (TPC-H q18's 1.5 M-row customer-orders side, about 1 GB built in each worker,
        is shuffled on 2 workers, while `part`, `customer` and `partsupp` stay broadcast).
        `broadcast_total_rows` caps the rows whatever the row size."""
        if self.broadcast_total_rows is None:
            return None
        budget_rows = min(self.broadcast_total_rows, self.broadcast_total_bytes // self.broadcast_row_bytes)
        return budget_rows // self.workers, self.broadcast_total_bytes // self.workers

    def datafusion_settings(self) -> dict[str, str]:
        """The DataFusion settings the query is planned with, over the session's own (see
        docs/configuration.md): the target partitions and, unless `broadcast_total_rows` is
        None, the hash join thresholds of a broadcast (`broadcast_thresholds`)."""
        settings = {"datafusion.execution.target_partitions": str(self.target_partitions)}
        thresholds = self.broadcast_thresholds()
        if thresholds is not None:
            rows, size = thresholds
            settings["datafusion.optimizer.hash_join_single_partition_threshold_rows"] = str(rows)
            settings["datafusion.optimizer.hash_join_single_partition_threshold"] = str(size)
        return settings


def _naming_unknown_settings(init):
    """`init` (a dataclass's) refusing an unknown keyword with the nearest setting's name,
    rather than Python's bare "unexpected keyword argument"."""

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        known = {f.name for f in fields(type(self))}
        for name in kwargs:
            if name not in known:
                raise TypeError(unknown_setting(name, known))
        init(self, *args, **kwargs)

    return checked


DistributedConfig.__init__ = _naming_unknown_settings(DistributedConfig.__init__)  # type: ignore[method-assign]
QueryPlanConfig.__init__ = _naming_unknown_settings(QueryPlanConfig.__init__)  # type: ignore[method-assign]
