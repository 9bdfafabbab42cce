"""The engine behind a DistributedContext: the user's session, the config, the workers and the
services every run of the context shares. It plans a DataFrame's query (one config snapshot for
the plan and its run) and starts the run.

DistributedDataFrames hold the engine, not the context, so the context (which makes frames)
and the frames (which run queries) never import each other."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from datafusion import DataFrame, SessionContext
from datafusion.plan import ExecutionPlan, LogicalPlan

from ..clusters.embedded import EmbeddedCluster
from ..coordinator.liveness import LivenessMonitor
from ..coordinator.membership import Membership
from ..coordinator.scheduler import QueryRun
from ..coordinator.services import RunServices, exchange_compression
from ..coordinator.worker_check import WorkerCheck, unanswered
from ..dashboard.history import QueryHistory
from ..dashboard.progress import ProgressNotifier
from ..dashboard.server import Dashboard
from ..dashboard.workers import WorkerStatus
from ..distributed_planner.boundaries import declare_splittable
from ..distributed_planner.config import DistributedConfig, QueryPlanConfig
from ..distributed_planner.file_pruning import TableStatistics, pruned_plan
from ..distributed_planner.one_node import choose_plan
from ..distributed_planner.planner import plan_query, single_node_plan
from ..distributed_planner.small_plans import one_task_anyway
from ..errors import ContextClosed, WorkersUnavailable, WorkerUnreachable
from ..events.chain import HandlerChain
from ..execution_plans.object_stores import ObjectStores, S3Store, with_store
from ..execution_plans.stage import DistributedPlan
from ..protocol.auth import TokenServerMiddlewareFactory, read_pem
from ..protocol.flight import ClientConfig, ClientPool
from ..protocol.resolver import StaticResolver, WorkerResolver
from ..runtime import streams
from ..runtime.extensions import Extension, install, load, splittable_nodes
from ..runtime.session import SessionBuilder, task_session
from ..runtime.session_settings import TaskSessions, TaskSettings, context_settings, travelling_settings
from ..work_unit_feed.service import FeedService
from .settings import changed_settings

log = logging.getLogger("datafusion_distributed.coordinator")


@dataclass(frozen=True)
class PlannedQuery:
    """A query's distributed plan and the config it was planned with, which its run reads too."""

    plan: DistributedPlan
    config: QueryPlanConfig


@dataclass(frozen=True)
class PlanningState:
    """The session queries are planned in (the user's, with the cluster's partitions and
    broadcast thresholds set), the user's settings their tasks carry (`travelling_settings`),
    and whether the session plans with the user's own partitions."""

    session: SessionContext
    task_settings: TaskSettings
    own_partitions: bool


def _feed_middleware(clients: ClientPool) -> dict[str, Any] | None:
    """The feed service's middleware: the cluster's token, checked as workers check it."""
    token = clients.settings.auth_token
    return {"auth": TokenServerMiddlewareFactory(token)} if token else None


class Engine:
    """Plans and runs the queries of one DistributedContext (see the module's docstring); the
    arguments are the context's."""

    def __init__(
        self,
        ctx: SessionContext | None,
        workers: Sequence[str] | WorkerResolver | None,
        config: DistributedConfig | None,
        session_builder: SessionBuilder | None,
        handlers: HandlerChain,
        progress: bool,
        extensions: Sequence[Extension] = (),
    ) -> None:
        self.handlers = handlers
        self.progress = progress
        self.file_statistics = TableStatistics()  # of the lakehouse tables registered
        self.extensions = tuple(extensions)  # as given: names are checked on workers by them
        loaded = tuple(load(e) for e in self.extensions)  # imported and made once, here
        declare_splittable(splittable_nodes(loaded))
        # the user's session, carrying the extensions' codecs too: plans are encoded there
        self.ctx = install(ctx if ctx is not None else SessionContext(), loaded)
        self.config = config or DistributedConfig()
        self.initial_config = self.config  # what RESET distributed.<name> returns to
        self.config_lock = threading.Lock()
        self._cluster: EmbeddedCluster | None = None
        if workers is None:
            self._cluster = EmbeddedCluster(
                self.config.embedded_workers,
                session_builder,
                handlers=self.handlers.user,
                extensions=loaded,
            )
            self.resolver: WorkerResolver = self._cluster
        elif isinstance(workers, WorkerResolver):
            self.resolver = workers
        elif isinstance(workers, (list, tuple)):
            self.resolver = StaticResolver(workers)
        else:
            raise TypeError("workers must be None, a list of URLs, or an object with get_urls()")
        self.membership = Membership(self.resolver)  # asked again as stages start
        self.clients = ClientPool(
            ClientConfig(
                self.config.connect_timeout,
                self.config.task_timeout,
                # a cluster the library started knows its own token; otherwise the configured one
                auth_token=getattr(self.resolver, "auth_token", None) or self.config.auth_token,
                tls_root_certs=read_pem(self.config.tls_root_certs),
                tls_client_cert=read_pem(self.config.tls_client_cert),
                tls_client_key=read_pem(self.config.tls_client_key),
            )
        )
        # Workers given by URL are checked before the first query runs (see `check_workers`;
        # planning alone calls no worker), those of a resolver in the background by the first
        # query that calls none of them; a cluster the library started (it has its own token)
        # started its workers itself.
        checked_at_start = isinstance(workers, (list, tuple)) and self.config.check_workers != "off"
        self._given_unchecked = checked_at_start  # checked before the first query runs
        self._given_check_lock = threading.Lock()
        self.liveness = LivenessMonitor(self.clients, self.config.liveness_timeout)  # shared by its queries
        self.liveness.quarantine.notify = self.handlers.notify  # a worker quarantined or restored
        started_here = getattr(self.resolver, "auth_token", None) is not None
        self._worker_check = None if checked_at_start or started_here else WorkerCheck(self.clients)
        # (key, the planning session and what depends on it), made again when the key changes
        self._planning: tuple[tuple[str, tuple[tuple[str, str], ...]], PlanningState] | None = None
        self._planning_lock = threading.Lock()
        # a partial, not a lambda over self: a cycle would keep an unclosed context (and its
        # embedded cluster) alive until the garbage collector finds it
        self._head_sessions = TaskSessions(functools.partial(task_session, session_builder, None, loaded))
        self._object_stores: ObjectStores = ()  # registered here: every task registers them too
        self._session_hook = session_builder is not None  # it may register stores of its own
        self._data_planes: dict[str, str] = {}  # worker URL -> where it serves streamed exchanges
        self._worker_extensions: dict[str, frozenset[str]] = {}  # worker URL -> its extensions' names
        self.feeds = FeedService(self.config.feed_host, functools.partial(_feed_middleware, self.clients))
        # what the dashboard, progress callbacks and the distributed.* tables read
        self.history = QueryHistory(self.config.history_length)
        self.progress_callbacks = ProgressNotifier(self.history)
        self.worker_status = WorkerStatus(self.resolver.get_urls, self.clients, self.liveness, self.history)
        self._closed = False
        self.dashboard: Dashboard | None = None
        if self.config.dashboard_port is not None:
            try:
                self.dashboard = Dashboard(
                    self.history,
                    self.worker_status,
                    self.config.dashboard_host,
                    self.config.dashboard_port,
                    self.clients.settings.auth_token,
                )
            except BaseException:
                self.close()  # the embedded cluster, if it started, with it
                raise

    def local_spools(self) -> tuple[str, ...]:
        """Spools of workers on this host (a cluster the library started): read in place."""
        root = getattr(self.resolver, "shared_spool_root", None)
        return (root,) if root else ()

    def exchange_compression(self, config: DistributedConfig | None = None) -> str | None:
        """The codec of exchange files under `config` (by default the current one): with "auto",
        none when they are read in place (no copy to save, and compressing costs CPU), lz4 when
        they cross the network."""
        return exchange_compression((config or self.config).compression, bool(self.local_spools()))

    def workers(self) -> list[str]:
        """The URLs of the workers queries run on now, from the resolver.

        Raises:
            ContextClosed: the context was closed (every query asks for its workers first).
        """
        if self._closed:
            raise ContextClosed()
        urls = self.membership.current()
        if not urls:
            raise ValueError("the worker resolver returned no workers")
        return urls

    def planning_session(self, workers: int, config: DistributedConfig | None = None) -> SessionContext:
        """A copy of the user's session, with the DataFusion settings a query on `workers`
        workers is planned with (`QueryPlanConfig.datafusion_settings` of `config`, by default the
        context's).

        The copy shares the user's catalogs, tables and object stores and starts from their
        current settings, so a `SET` of theirs applies, and changing its settings leaves the
        user's context as it was; a plan made from a logical plan holds its UDFs itself.
        (DataFusion's Python API makes such a copy only through `enable_url_table`; a plan made
        from a logical plan never looks tables up by name, so url tables change nothing here.)"""
        return self._planning_state((config or self.config).planner(workers)).session

    def _planning_state(self, config: QueryPlanConfig) -> PlanningState:
        """The planning session (see `planning_session`) and what depends on it, made again only
        when the user's settings (or the cluster's size) changed: the copy and its SETs cost
        more than planning a small query."""
        overrides = tuple(config.datafusion_settings().items())
        key = (repr(self.ctx), overrides)  # the context's repr lists every setting
        with self._planning_lock:
            if self._planning is not None and self._planning[0] == key:
                return self._planning[1]
        session = self.ctx.enable_url_table()
        for name, value in overrides:
            session.sql(f"SET {name} = {value}")

        def partitions(ctx: SessionContext) -> str | None:
            return context_settings(ctx).get("datafusion.execution.target_partitions")

        state = PlanningState(
            session, travelling_settings(session), partitions(self.ctx) == partitions(session)
        )
        with self._planning_lock:
            self._planning = (key, state)
        return state

    def use_config(self, config: DistributedConfig) -> None:
        """Run the following queries with `config`: the planning and per-query settings are read
        by each query; the deadlines the client pool and the liveness monitor hold are changed
        there, for the calls and probes that start from now on."""
        old, self.config = self.config, config
        if (config.connect_timeout, config.task_timeout) != (old.connect_timeout, old.task_timeout):
            self.clients.set_deadlines(config.connect_timeout, config.task_timeout)
        if config.liveness_timeout != old.liveness_timeout:
            self.liveness.set_timeout(config.liveness_timeout)
        if config.history_length != old.history_length:
            self.history.set_length(config.history_length)

    def add_object_store(self, store: S3Store) -> None:
        """Send `store` with every task of the queries planned from now on."""
        with self._planning_lock:
            self._object_stores = with_store(self._object_stores, store)

    @property
    def object_stores(self) -> ObjectStores:
        """The stores registered with `register_object_store`, sent with every task."""
        return self._object_stores

    def plan(self, df: DataFrame) -> PlannedQuery:
        """Plan `df` for the current workers, in a copy of the user's session, and cut it into
        stages (or keep it on one node when it cannot travel faithfully; see `choose_plan`).
        The config it is planned with is made once, here, and its run reads the same one,
        whatever a SET does meanwhile."""
        workers = self.workers()
        config = self.config.planner(len(workers))
        stores = self._object_stores

        def cut(logical: LogicalPlan) -> DistributedPlan:
            planning = self._planning_state(config)
            session = planning.session
            physical = session.create_dataframe_from_logical_plan(logical).execution_plan()
            if (one_task := one_task_anyway(physical, config, self.handlers)) is not None:
                # not worth cutting; run as planned when planned with the context's own partitions
                # (only how joins build may differ, never the answer), else planned again there
                runs_in = self.ctx if planning.own_partitions else session
                return single_node_plan(physical, runs_in, tasks=one_task)
            plan = plan_query(
                physical,
                session,
                config,
                self.handlers,
                logical.display_indent_schema(),
                self._head_sessions.base(),  # built as the workers' are: what a task plan meets
                self.file_statistics,
            )
            return dataclasses.replace(plan, task_settings=planning.task_settings, object_stores=stores)

        lacking = self._lacking_extensions(workers)
        plan = choose_plan(df, self.ctx, cut, stores, self._session_hook, lacking, self._pruned)
        return PlannedQuery(dataclasses.replace(plan, settings=changed_settings(config)), config)

    def _pruned(self, plan: ExecutionPlan) -> tuple[ExecutionPlan, tuple[str, ...]]:
        """`plan`, of one task run here, without the files the tables' statistics rule out."""
        physical, pruned = pruned_plan(plan, self.ctx, self.file_statistics)
        return physical, tuple(p.describe() for p in pruned)

    def run(self, planned: PlannedQuery, handlers: HandlerChain, sql: str = "") -> QueryRun:
        """A run of `planned` on the current workers, its events going to `handlers` and into
        the context's query history (`sql`: the query's text there)."""
        handlers = handlers.with_handlers([self.history.recorder(planned.plan, sql)])
        services = RunServices(
            self.clients,
            self.liveness,
            self.feeds,
            self._head_sessions,
            self.local_spools(),
            self.membership,
            # the library's own embedded cluster, whose workers may host streams: each says so
            # as it does to other processes (see coordinator.streaming)
            in_process=self._cluster is not None and all(w.data_plane_port for w in self._cluster.workers),
            data_plane=self._data_plane if self._cluster is None else None,
        )
        workers = self.workers()
        self._check_given_workers()
        if self._worker_check is not None and not planned.plan.is_distributed:
            self._worker_check.start(workers)  # in the background, the first time only
        return QueryRun(planned.plan, workers, services, planned.config, handlers)

    def _lacking_extensions(self, urls: Sequence[str]) -> str:
        """Which of the context's extensions given by name a worker of `urls` says it lacks
        (asked once per worker; the embedded cluster's were started with them), as the reason
        a query must run on one node; "" if none."""
        named = [e for e in self.extensions if isinstance(e, str)]
        if not named or self._cluster is not None:
            return ""
        for url in urls:
            if url not in self._worker_extensions:
                try:
                    reported = str(self.clients.get(url).health().get("extensions", ""))
                except Exception:  # unreachable now: its tasks go elsewhere (see the scheduler)
                    continue
                self._worker_extensions[url] = frozenset(filter(None, reported.split(",")))
            missing = [name for name in named if name not in self._worker_extensions[url]]
            if missing:
                return (
                    f"worker {url} was started without the extension {missing[0]!r} this context has: "
                    f"its tasks could not decode plans that use it (start it with --extension {missing[0]})"
                )
        return ""

    def _data_plane(self, url: str) -> str:
        """Where worker `url` serves its streamed exchanges: the host the coordinator reaches it
        by, and the port it reports (asked once per worker)."""
        if url not in self._data_planes:
            port = int(self.clients.get(url).health().get("data_plane_port", 0))
            if not port:
                raise WorkerUnreachable(
                    url,
                    "it serves no data plane for streamed exchanges (it has a memory limit, a "
                    "session hook, plan rewrites or TLS; see docs/native.md)",
                )
            host = urlparse(url).hostname or ""
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            streams.trust_peer(address, self.clients.settings.auth_token or "")  # a head reads there
            self._data_planes[url] = address
        return self._data_planes[url]

    def head_session(self, settings: TaskSettings = (), stores: ObjectStores = ()) -> SessionContext:
        """The session the coordinator runs a head stage carrying `settings` (the user's
        DataFusion settings, see `DistributedPlan.task_settings`) and object `stores` in: built
        once, by the session hook if there is one, like a worker's, and copied with the settings
        and stores (a hook that fails is tried again next query)."""
        return self._head_sessions.session(settings, stores)

    @property
    def closed(self) -> bool:
        """Whether `close()` was called: queries then raise `ContextClosed`."""
        return self._closed

    def _check_given_workers(self) -> None:
        """Ask each worker given by URL for its health, before the context's first query runs
        (again at the next query while any fails): see `check_workers`."""
        with self._given_check_lock:
            if not self._given_unchecked:
                return
            urls = self.resolver.get_urls()
            failures = unanswered(self.clients, urls)
            if not failures:
                self._given_unchecked = False
                return
            error = WorkersUnavailable(failures, len(urls))
            if self.config.check_workers == "require":
                raise error
            self._given_unchecked = False  # run degraded, as asked: avoided until they answer
            log.warning("%s", str(error).rsplit("\n", 1)[0])
            for url in failures:
                self.liveness.quarantine.add(url)

    def close(self) -> None:
        """Stop the embedded cluster (if any) and close connections to workers; later queries
        raise `ContextClosed`. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        dashboard = getattr(self, "dashboard", None)  # None too when __init__ failed before it
        if dashboard is not None:
            dashboard.close()
        self.progress_callbacks.close()
        if self._worker_check is not None:
            self._worker_check.stop()
        self.feeds.close()
        self.liveness.quarantine.close()
        self.clients.close()
        if self._cluster is not None:
            self._cluster.close()
