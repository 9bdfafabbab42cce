"""Settings of a DistributedContext: planning, runtime and the embedded cluster."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields

from ..distributed_planner.config import PlanningConfig, require, unknown_setting
from ..protocol.auth import token_from_env


@dataclass(frozen=True)
class DistributedConfig(PlanningConfig):
    """Every setting of a distributed query, with its default, checked when it is made.

    The planning settings (`partitions_per_task`, `bytes_per_partition`, `cardinality_factor`,
    `max_tasks_per_stage`, `broadcast_inline_bytes`, `broadcast_total_rows`,
    `broadcast_total_bytes`, `broadcast_row_bytes`, `memory_table_inline_bytes`, and adaptive
    execution's `adaptive`, `adaptive_one_task_bytes`, `adaptive_task_bytes`, `skew_factor`,
    `skew_min_bytes`) are those of `PlanningConfig`, documented there; the others decide how
    the coordinator runs a plan.

    Attributes:
        embedded_workers: workers the embedded cluster starts when no workers are given. At
            least 1. Default 2.
        compression: codec of exchanged Arrow IPC files: "lz4", "zstd", None, or "auto": None
            when the workers' outputs are read in place (a cluster the library started on this
            host), "lz4" otherwise. Default "auto".
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

    embedded_workers: int = 2
    compression: str | None = "auto"
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
        super().__post_init__()
        require(self.embedded_workers >= 1, "embedded_workers", "at least 1", self.embedded_workers)
        codecs = (None, "lz4", "zstd", "auto")
        require(self.compression in codecs, "compression", "None, 'lz4', 'zstd' or 'auto'", self.compression)
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
