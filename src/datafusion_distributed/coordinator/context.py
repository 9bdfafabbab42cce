"""DistributedContext: the public entry point, shaped like DataFusion's SessionContext. It plans
queries on the user's SessionContext and makes DistributedDataFrames that run them on workers."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import pyarrow as pa
from datafusion import DataFrame, SessionContext, SQLOptions

from ..codec.feed_scan import FEED_FILE_PREFIX
from ..distributed_planner.planner import plan_query, single_node_plan
from ..events.chain import HandlerChain
from ..execution_plans.object_stores import ObjectStores, S3Store, store_for_url, with_store
from ..execution_plans.stage import DistributedPlan
from ..metrics.progress import running_in_notebook
from ..protocol.auth import TokenServerMiddlewareFactory, read_pem
from ..protocol.flight import ClientPool, ClientSettings
from ..protocol.resolver import StaticResolver, WorkerResolver
from ..runtime.session import SessionBuilder, task_session
from ..runtime.session_settings import TaskSessions, TaskSettings, travelling_settings
from ..work_unit_feed.feed import Provider, Reader, WorkUnitFeed
from ..work_unit_feed.service import FeedService
from .config import DistributedConfig
from .dataframe import DistributedDataFrame
from .errors import ContextClosed, InvalidSetting, QueryFailed
from .liveness import LivenessMonitor
from .object_store_writes import bucket_of
from .settings import changed_settings, check_changeable, setting_rows, with_setting
from .settings_statements import (
    PREFIX,
    SetSetting,
    SettingsStatement,
    ShowSettings,
    parse_settings_statement,
)

if TYPE_CHECKING:
    from .. import EmbeddedCluster


ACTS_WHEN_PLANNED = "DELETE, UPDATE and TRUNCATE act on their table when DataFusion plans them: planned once"


RAN_WHEN_PLANNED = (
    "DataFusion ran this statement (CREATE TABLE [AS], CREATE VIEW, DROP, ...) in the coordinator "
    "when it was planned; nothing is left to run"
)


def _ran_when_planned(logical: Any) -> bool:
    """Whether `logical` (a LogicalPlan) is what DataFusion leaves of a DDL statement it ran
    while planning it (`SessionContext.sql` runs CREATE TABLE AS, CREATE VIEW, DROP, ... at
    once): an empty relation of no rows, which no query of rows plans as."""
    return logical.display() == "EmptyRelation: rows=0"


def _acts_when_planned(logical: Any) -> bool:
    """Whether planning `logical` (a LogicalPlan) changes data: a memory table's DELETE, UPDATE
    and TRUNCATE happen in DataFusion's physical planner, so the query may be planned once only."""
    first = logical.display().split("\n", 1)[0]
    return first.startswith("Dml: op=[") and not first.startswith("Dml: op=[Insert")


_EXPLAIN_ANALYZE = re.compile(r"^\s*explain\s+analyze\s+(?:(verbose)\s+)?(.*)$", re.IGNORECASE | re.DOTALL)


def split_explain_analyze(query: str) -> tuple[str, bool] | None:
    """(the query, verbose) if `query` is `EXPLAIN ANALYZE [VERBOSE] <query>`, else None."""
    match = _EXPLAIN_ANALYZE.match(query)
    if match is None:
        return None
    return match.group(2), match.group(1) is not None


P = ParamSpec("P")
R = TypeVar("R")


def _on_ctx(
    method: Callable[Concatenate[SessionContext, P], R],
) -> Callable[Concatenate[DistributedContext, P], R]:
    """`method` of SessionContext, called on the wrapped context: DataFusion's own signature and
    docstring, so it cannot drift from the DataFusion release installed."""

    @functools.wraps(method)
    def on_ctx(self: DistributedContext, *args: P.args, **kwargs: P.kwargs) -> R:
        return getattr(self.ctx, method.__name__)(*args, **kwargs)

    on_ctx.__qualname__ = f"DistributedContext.{method.__name__}"
    return on_ctx


def _made_on_ctx(
    method: Callable[Concatenate[SessionContext, P], DataFrame],
) -> Callable[Concatenate[DistributedContext, P], DistributedDataFrame]:
    """`method`, a SessionContext call that makes a DataFrame, made on the wrapped context and
    returned distributed; DataFusion's errors become QueryFailed."""

    @functools.wraps(method)
    def made_on_ctx(self: DistributedContext, *args: P.args, **kwargs: P.kwargs) -> DistributedDataFrame:
        return self._frame(getattr(self.ctx, method.__name__), *args, **kwargs)

    made_on_ctx.__qualname__ = f"DistributedContext.{method.__name__}"
    made_on_ctx.__doc__ = (
        f"DataFusion's `SessionContext.{method.__name__}`, as a DistributedDataFrame.\n\n{method.__doc__}"
    )
    made_on_ctx.__signature__ = inspect.signature(method).replace(return_annotation=DistributedDataFrame)
    return made_on_ctx


def _feed_middleware(clients: ClientPool) -> dict[str, Any] | None:
    """The feed service's middleware: the cluster's token, checked as workers check it."""
    token = clients.settings.auth_token
    return {"auth": TokenServerMiddlewareFactory(token)} if token else None


class DistributedContext:
    """Runs queries of an ordinary DataFusion SessionContext across workers.

    Args:
        ctx: the SessionContext whose tables, views, UDFs and settings queries use; a new one
            if omitted.
        workers: None for the embedded in-process cluster (the default); a list of worker URLs
            ("grpc://host:port"); or any resolver, an object with `get_urls() -> list[str]`
            (such as `LocalCluster`).
        config: planning and runtime settings (see `DistributedConfig`).
        session_builder: for the embedded cluster and the coordinator's head stage, a hook
            `(SessionConfig) -> SessionContext` building the context tasks run in (once per
            worker, and once for the head stages of this context's queries).
        handlers: event handlers (see `events`), asked before the built-in ones: task counts,
            task routing, lifecycle events; and, on the embedded cluster's workers, plan rewrites.
        progress: show a live progress line while queries run (only on a terminal or in a
            notebook). Default: on in a Jupyter notebook, off elsewhere; each call can say
            otherwise.

    Examples:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed import DistributedContext
        >>> with DistributedContext(SessionContext()) as dctx:
        ...     dctx.sql("SELECT 1 + 1 AS two").to_pylist()
        [{'two': 2}]
    """

    def __init__(
        self,
        ctx: SessionContext | None = None,
        workers: Sequence[str] | WorkerResolver | None = None,
        *,
        config: DistributedConfig | None = None,
        session_builder: SessionBuilder | None = None,
        handlers: Sequence[Any] = (),
        progress: bool | None = None,
    ) -> None:
        self.handlers = HandlerChain(handlers)
        self.progress = running_in_notebook() if progress is None else progress
        self.ctx = ctx if ctx is not None else SessionContext()
        self.config = config or DistributedConfig()
        self._initial_config = self.config  # what RESET distributed.<name> returns to
        self._config_lock = threading.Lock()
        self.session_builder = session_builder
        self._cluster: EmbeddedCluster | None = None
        if workers is None:
            from .. import EmbeddedCluster  # through the public API: clusters start workers

            self._cluster = EmbeddedCluster(
                self.config.embedded_workers, session_builder, handlers=self.handlers.user
            )
            self.resolver: WorkerResolver = self._cluster
        elif isinstance(workers, WorkerResolver):
            self.resolver = workers
        elif isinstance(workers, (list, tuple)):
            self.resolver = StaticResolver(workers)
        else:
            raise TypeError("workers must be None, a list of URLs, or an object with get_urls()")
        self.clients = ClientPool(
            ClientSettings(
                self.config.connect_timeout,
                self.config.task_timeout,
                # a cluster the library started knows its own token; otherwise the configured one
                auth_token=getattr(self.resolver, "auth_token", None) or self.config.auth_token,
                tls_root_certs=read_pem(self.config.tls_root_certs),
                tls_client_cert=read_pem(self.config.tls_client_cert),
                tls_client_key=read_pem(self.config.tls_client_key),
            )
        )
        self.liveness = LivenessMonitor(self.clients, self.config.liveness_timeout)  # shared by its queries
        # (key, planning session, the settings its tasks carry), made again when the key changes
        self._planning: tuple[tuple[str, TaskSettings], SessionContext, TaskSettings] | None = None
        self._planning_lock = threading.Lock()
        # a partial, not a lambda over self: a cycle would keep an unclosed context (and its
        # embedded cluster) alive until the garbage collector finds it
        self._head_sessions = TaskSessions(functools.partial(task_session, session_builder))
        self._object_stores: ObjectStores = ()  # registered here: every task registers them too
        self.feeds = FeedService(self.config.feed_host, functools.partial(_feed_middleware, self.clients))
        self._closed = False

    # -- workers and planning ------------------------------------------------------------------------------
    def local_spools(self) -> tuple[str, ...]:
        """Spools of workers on this host (a cluster the library started): read in place."""
        root = getattr(self.resolver, "shared_spool_root", None)
        return (root,) if root else ()

    def exchange_compression(self) -> str | None:
        """The codec of exchange files: with "auto", none when they are read in place (no copy
        to save, and compressing costs CPU), lz4 when they cross the network."""
        if self.config.compression != "auto":
            return self.config.compression
        return None if self.local_spools() else "lz4"

    def workers(self) -> list[str]:
        """The URLs of the workers queries run on now, from the resolver.

        Raises:
            ContextClosed: the context was closed (every query asks for its workers first).
        """
        if self._closed:
            raise ContextClosed()
        urls = self.resolver.get_urls()
        if not urls:
            raise ValueError("the worker resolver returned no workers")
        return urls

    def planning_session(self, workers: int, config: DistributedConfig | None = None) -> SessionContext:
        """A copy of the user's session, with the DataFusion settings a query on `workers`
        workers is planned with (`PlannerConfig.datafusion_settings` of `config`, by default the
        context's).

        The copy shares the user's catalogs, tables and object stores and starts from their
        current settings, so a `SET` of theirs applies, and changing its settings leaves the
        user's context as it was; a plan made from a logical plan holds its UDFs itself.
        (DataFusion's Python API makes such a copy only through `enable_url_table`; a plan made
        from a logical plan never looks tables up by name, so url tables change nothing here.)"""
        return self._planning_state(workers, config or self.config)[0]

    def _planning_state(self, workers: int, config: DistributedConfig) -> tuple[SessionContext, TaskSettings]:
        """The planning session (see `planning_session`) and the user's settings its queries'
        tasks carry (`travelling_settings`), both made again only when the user's settings (or
        the cluster's size) changed: the copy and its SETs cost more than planning a small query."""
        overrides = tuple(config.planner(workers).datafusion_settings().items())
        key = (repr(self.ctx), overrides)  # the context's repr lists every setting
        with self._planning_lock:
            if self._planning is not None and self._planning[0] == key:
                return self._planning[1], self._planning[2]
        session = self.ctx.enable_url_table()
        for name, value in overrides:
            session.sql(f"SET {name} = {value}")
        state = (session, travelling_settings(session))
        with self._planning_lock:
            self._planning = (key, *state)
        return state

    # -- DataFrames: made on the wrapped context, run distributed ------------------------------
    def sql(
        self,
        query: str,
        options: SQLOptions | None = None,
        param_values: dict[str, Any] | None = None,
        **named_params: Any,
    ) -> DistributedDataFrame:
        """Plan `query` on the wrapped context; it runs distributed when its result is asked for.

        The arguments are those of DataFusion's `SessionContext.sql`: `options` to refuse DDL,
        DML or statements; `param_values` for the values of `$1` or `$name` placeholders;
        `named_params` replace `$name` in the text by a string, or by a table for a DataFrame
        (a DistributedDataFrame too).

        `EXPLAIN ANALYZE [VERBOSE] <query>` runs the query at once and returns the distributed
        plan with its metrics (columns plan_type and plan, as DataFusion's EXPLAIN has).

        The `distributed` settings namespace changes this context's `config` for the queries
        that follow (see docs/configuration.md): `SET distributed.<name> = <value>`,
        `RESET distributed.<name>` (the value the context was made with), and
        `SHOW distributed.<name>` or `SHOW distributed` (columns name and value).
        `SET datafusion.<name> = ...` goes to the wrapped context, as DataFusion's own.

        Raises:
            QueryFailed: the query does not parse or plan (DataFusion's message), or a setting
                is unknown, fixed for the context, or given a bad value (the message names it;
                it is a ValueError too).

        Examples:
            >>> dctx = DistributedContext()
            >>> dctx.sql("SELECT $1 + 1 AS two", param_values={"1": 1}).to_pylist()
            [{'two': 2}]
            >>> _ = dctx.sql("SET distributed.partitions_per_task = 4")
            >>> dctx.sql("SHOW distributed.partitions_per_task").to_pylist()
            [{'name': 'distributed.partitions_per_task', 'value': '4'}]
        """
        try:
            statement = parse_settings_statement(query)
        except ValueError as exc:
            raise InvalidSetting(str(exc)) from exc
        if statement is not None:
            return self._settings_statement(statement, options, named_params)
        explained = split_explain_analyze(query)
        if explained is not None:
            planned = self.sql(explained[0], options, param_values, **named_params)
            text = planned.explain_string(analyze=True, verbose=explained[1])
            return DistributedDataFrame(
                self, self.ctx.from_pydict({"plan_type": ["Plan with Metrics"], "plan": [text]})
            )
        # A DistributedDataFrame given as a table is the DataFusion DataFrame it wraps.
        named = {k: v.df if isinstance(v, DistributedDataFrame) else v for k, v in named_params.items()}
        return self._frame(self.ctx.sql, query, options, param_values, **named)

    def _settings_statement(
        self, statement: SettingsStatement, options: SQLOptions | None, named_params: dict[str, Any]
    ) -> DistributedDataFrame:
        """Answer a statement of the `distributed` namespace (see `sql`)."""
        try:
            if isinstance(statement, ShowSettings):
                token_in_use = self.clients.settings.auth_token is not None
                rows = setting_rows(self.config, token_in_use, statement.name)
                table = pa.table(rows, schema=pa.schema([("name", pa.string()), ("value", pa.string())]))
                return DistributedDataFrame(self, self.ctx.from_arrow(table))
            self._check_statements_allowed(statement, options)
            with self._config_lock:
                if isinstance(statement, SetSetting):
                    value, quoted = statement.value, statement.quoted
                    if not quoted and value.startswith("$") and value[1:] in named_params:
                        value = str(named_params[value[1:]])  # as DataFusion replaces `$name`
                    self._use_config(with_setting(self.config, statement.name, value, quoted))
                else:
                    check_changeable(statement.name)
                    initial = getattr(self._initial_config, statement.name)
                    self._use_config(dataclasses.replace(self.config, **{statement.name: initial}))
        except ValueError as exc:
            raise InvalidSetting(str(exc)) from exc
        return DistributedDataFrame(self, self.ctx.from_pydict({}))  # as DataFusion's SET: no columns

    def _check_statements_allowed(self, statement: SettingsStatement, options: SQLOptions | None) -> None:
        """Refuse SET and RESET as DataFusion does when `options` forbid statements. SQLOptions
        cannot be read, so DataFusion is asked about a statement that changes nothing: the
        DEALLOCATE of a prepared statement that does not exist."""
        if options is None:
            return
        try:
            self.ctx.sql(f"DEALLOCATE distributed_probe_{uuid.uuid4().hex}", options)
        except Exception as exc:  # DataFusion raises plain Exception
            if "Statement not supported" in str(exc):
                verb = "SET" if isinstance(statement, SetSetting) else "RESET"
                raise QueryFailed(
                    f"Error during planning: Statement not supported: {verb} {PREFIX}{statement.name} "
                    "(the SQLOptions given do not allow statements)"
                ) from exc

    def _use_config(self, config: DistributedConfig) -> None:
        """Run the following queries with `config`: the planning and per-query settings are read
        by each query; the deadlines the client pool and the liveness monitor hold are changed
        there, for the calls and probes that start from now on."""
        old, self.config = self.config, config
        if (config.connect_timeout, config.task_timeout) != (old.connect_timeout, old.task_timeout):
            self.clients.set_deadlines(config.connect_timeout, config.task_timeout)
        if config.liveness_timeout != old.liveness_timeout:
            self.liveness.set_timeout(config.liveness_timeout)

    def _frame(self, make: Callable[..., DataFrame], *args: Any, **kwargs: Any) -> DistributedDataFrame:
        """A DataFrame made on the wrapped context, distributed."""
        try:
            return DistributedDataFrame(self, make(*args, **kwargs))
        except Exception as exc:  # DataFusion raises plain Exception (or ValueError)
            raise QueryFailed.of(exc) from exc

    def table(self, name: str) -> DistributedDataFrame:
        """The table (or view) registered as `name`.

        Examples:
            >>> dctx = DistributedContext()
            >>> dctx.register_batch("t", pa.record_batch({"a": [1, 2, 3]}))
            >>> dctx.table("t").count()
            3
        """
        return self._frame(self.ctx.table, name)

    read_parquet = _made_on_ctx(SessionContext.read_parquet)
    read_csv = _made_on_ctx(SessionContext.read_csv)
    read_json = _made_on_ctx(SessionContext.read_json)
    read_arrow = _made_on_ctx(SessionContext.read_arrow)
    read_avro = _made_on_ctx(SessionContext.read_avro)
    from_pydict = _made_on_ctx(SessionContext.from_pydict)
    from_pylist = _made_on_ctx(SessionContext.from_pylist)
    from_arrow = _made_on_ctx(SessionContext.from_arrow)
    from_pandas = _made_on_ctx(SessionContext.from_pandas)
    from_polars = _made_on_ctx(SessionContext.from_polars)

    # -- tables, functions and catalogs: the wrapped SessionContext's own -----------------------
    register_parquet = _on_ctx(SessionContext.register_parquet)
    register_csv = _on_ctx(SessionContext.register_csv)
    register_json = _on_ctx(SessionContext.register_json)
    register_arrow = _on_ctx(SessionContext.register_arrow)
    register_avro = _on_ctx(SessionContext.register_avro)
    register_listing_table = _on_ctx(SessionContext.register_listing_table)
    register_record_batches = _on_ctx(SessionContext.register_record_batches)
    register_batch = _on_ctx(SessionContext.register_batch)
    register_table = _on_ctx(SessionContext.register_table)

    def register_view(self, name: str, df: DataFrame | DistributedDataFrame) -> None:
        """Register `df` (a DistributedDataFrame, or DataFusion's) as the view `name` of the
        wrapped context: queries of it run distributed like any other query.

        Examples:
            >>> dctx = DistributedContext()
            >>> dctx.register_view("one", dctx.sql("SELECT 1 AS one"))
            >>> dctx.sql("SELECT one FROM one").to_pydict()
            {'one': [1]}
        """
        return self.ctx.register_view(name, df.df if isinstance(df, DistributedDataFrame) else df)

    def register_feed(
        self,
        name: str,
        provider: Provider,
        read: Reader | str,
        schema: pa.Schema,
        *,
        tasks: int | None = None,
    ) -> WorkUnitFeed:
        """Register `name` as a table whose rows come from work units discovered while a
        query runs (object keys listed page by page, a paginated API, offset ranges, ...).

        `provider` gives the units (picklable values) on the coordinator, started when a query
        reading the table runs, and pulled as the tasks reading the table ask for units: an
        iterable or async iterable, or a function returning one (called by each query).
        `read(unit)` returns that unit's rows (a pyarrow RecordBatch, Table, RecordBatchReader
        or an iterable of them, columns by name cast to `schema`); it runs on the workers,
        pickled like Python UDFs. With `read="parquet"` each unit is the absolute path of a
        Parquet file, read by DataFusion's own Parquet reader in the tasks, as a registered
        Parquet table's files are (see docs/feeds.md). `tasks` tasks read the table (default: the task-count
        handlers choose, one per worker by default), each reading as many units at once as it
        has partitions of the table's scan (`partitions_per_task` by default).
        Every unit is read once per scan of the table in a successful query, also when a
        worker is lost. The table is registered on the wrapped context (as an empty Arrow table
        with the feed's schema: a query of the plain SessionContext reads no row of it).

        Raises:
            ValueError, TypeError: a bad schema, provider, reader, or count.

        Examples:
            >>> import pyarrow as pa
            >>> dctx = DistributedContext()
            >>> feed = dctx.register_feed(
            ...     "squares", lambda: iter(range(4)), lambda n: pa.table({"n": [n], "square": [n * n]}),
            ...     pa.schema([("n", pa.int64()), ("square", pa.int64())]))
            >>> dctx.sql("SELECT sum(square) AS s FROM squares").to_pylist()
            [{'s': 14}]
        """
        feed = WorkUnitFeed(name, provider, read, schema, tasks=tasks)
        path = self.feeds.add(feed)
        if self.ctx.table_exist(name):
            self.ctx.deregister_table(name)
        self.ctx.register_arrow(name, path, schema=feed.schema)
        return feed

    register_dataset = _on_ctx(SessionContext.register_dataset)

    def register_object_store(self, schema: str, store: S3Store, host: str | None = None) -> None:
        """Register `store` for the URLs under `schema` (`"s3://<bucket>"`) on the wrapped
        context, and send it with every task of this context's queries, so the workers (and
        the coordinator's head stage) read and write those URLs through the same store.

        `store` is an `S3Store`: a description every process can rebuild (DataFusion's own
        store objects cannot be read back to send them). Its explicit credentials travel in the
        task messages, never shown in logs, `explain()` or errors; settings it leaves out come
        from each process's own `AWS_*` environment. A store registered again for the same URL
        replaces the first. See docs/object-stores.md.

        Args:
            schema: `s3://<bucket>`; or, as DataFusion's `register_object_store` takes it,
                the scheme `s3://` with the bucket as `host`.
            store: the S3Store of that bucket.
            host: the bucket, when `schema` is only the scheme.

        Raises:
            TypeError: `store` is not an S3Store (register other stores on each worker in a
                session hook).
            ValueError: the URL is not the store's.
        """
        store = store_for_url(schema + (host or ""), store)
        store.register(self.ctx)
        with self._planning_lock:
            self._object_stores = with_store(self._object_stores, store)

    @property
    def object_stores(self) -> ObjectStores:
        """The stores registered with `register_object_store`, sent with every task."""
        return self._object_stores

    register_udf = _on_ctx(SessionContext.register_udf)
    register_udaf = _on_ctx(SessionContext.register_udaf)
    register_udwf = _on_ctx(SessionContext.register_udwf)
    register_udtf = _on_ctx(SessionContext.register_udtf)
    deregister_table = _on_ctx(SessionContext.deregister_table)
    table_exist = _on_ctx(SessionContext.table_exist)
    catalog = _on_ctx(SessionContext.catalog)
    catalog_names = _on_ctx(SessionContext.catalog_names)
    session_id = _on_ctx(SessionContext.session_id)

    # -- planning -------------------------------------------------------------------------------
    def distributed_plan(self, df: DataFrame) -> DistributedPlan:
        """Plan `df` for the current workers, in a copy of the user's session, and cut it into
        stages (or keep it on one node when it cannot travel faithfully; see `plan_query`)."""
        settings = self.config  # one config for the whole plan, whatever a SET does meanwhile
        workers = len(self.workers())
        logical = df.logical_plan()
        try:
            if _acts_when_planned(logical):
                plan = single_node_plan(df.execution_plan(), self.ctx, ACTS_WHEN_PLANNED)
            elif _ran_when_planned(logical):
                plan = single_node_plan(df.execution_plan(), self.ctx, RAN_WHEN_PLANNED)
            else:
                session, task_settings = self._planning_state(workers, settings)
                physical = session.create_dataframe_from_logical_plan(logical).execution_plan()
                config = settings.planner(workers)
                plan = plan_query(physical, session, config, self.handlers, logical.display_indent_schema())
                plan = dataclasses.replace(
                    plan, task_settings=task_settings, object_stores=self._object_stores
                )
                unstaged = self._unstaged_write(plan)
                if unstaged:
                    plan = single_node_plan(df.execution_plan(), self.ctx, unstaged)
                elif plan.feeds and plan.in_memory:
                    # one task, run here; from its bytes, so that it reads the feed's units
                    plan = dataclasses.replace(plan, physical=None, session=None)
                elif plan.in_memory:
                    # Run exactly what the user's own context runs: planned with their settings
                    # (partitions, memory limit), showing their information_schema.
                    plan = single_node_plan(
                        df.execution_plan(), self.ctx, plan.single_node, plan.final.reason
                    )
        except Exception as exc:  # DataFusion raises plain Exception
            raise QueryFailed.of(exc) from exc
        shown = plan.physical.display_indent() if plan.in_memory else ""
        if FEED_FILE_PREFIX in shown.split("\n", 1)[0] and shown.startswith("DataSinkExec"):
            raise QueryFailed(
                "a work-unit feed table cannot be written to (INSERT INTO): its rows are its units', "
                "read when a query runs"
            )
        if FEED_FILE_PREFIX in shown:
            raise QueryFailed(
                "the query reads a work-unit feed table but must run on one node from DataFusion's "
                f"own plan ({plan.single_node or plan.final.reason}); a feed's units are read only "
                "by plans that travel as bytes, so it would read no row"
            )
        return dataclasses.replace(plan, settings=changed_settings(settings))

    def _unstaged_write(self, plan: DistributedPlan) -> str:
        """Why the write `plan` splits over tasks cannot be staged and committed ("" if it can):
        a write into a bucket needs its S3Store, to reach the bucket from the coordinator."""
        bucket = bucket_of(plan.write.destination) if plan.write is not None else None
        if bucket is None or any(store.bucket == bucket for store in self._object_stores):
            return ""
        return (
            f"DataSinkExec writes to s3://{bucket}, whose store was not registered with "
            "DistributedContext.register_object_store (an S3Store): written from one node"
        )

    def head_session(self, settings: TaskSettings = (), stores: ObjectStores = ()) -> SessionContext:
        """The session the coordinator runs a head stage carrying `settings` (the user's
        DataFusion settings, see `DistributedPlan.task_settings`) and object `stores` in: built
        once, by the session hook if there is one, like a worker's, and copied with the settings
        and stores (a hook that fails is tried again next query)."""
        return self._head_sessions.session(settings, stores)

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether `close()` was called: queries then raise `ContextClosed`."""
        return self._closed

    def close(self) -> None:
        """Stop the embedded cluster (if any) and close connections to workers; later queries
        raise `ContextClosed`. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        self.feeds.close()
        self.clients.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> DistributedContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
