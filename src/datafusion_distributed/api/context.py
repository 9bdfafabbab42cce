"""DistributedContext: the public entry point, shaped like DataFusion's SessionContext. It plans
queries on the user's SessionContext and makes DistributedDataFrames that run them on workers."""

from __future__ import annotations

import dataclasses
import errno
import functools
import inspect
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

import pyarrow as pa
from datafusion import DataFrame, SessionContext, SQLOptions

from ..clusters.embedded import EmbeddedCluster
from ..common.fs import missing_local_path
from ..coordinator.liveness import LivenessMonitor
from ..dashboard.history import Progress
from ..dashboard.tables import SCHEMA as HISTORY_SCHEMA
from ..dashboard.tables import named_tables, tables_context
from ..distributed_planner.config import DistributedConfig
from ..errors import InvalidSetting, QueryFailed, said_all
from ..events.chain import HandlerChain
from ..execution_plans.object_stores import ObjectStores, S3Store, store_for_url
from ..execution_plans.stage import DistributedPlan
from ..metrics.progress import running_in_notebook
from ..protocol.flight import ClientPool
from ..protocol.resolver import WorkerResolver
from ..runtime.extensions import Extension
from ..runtime.session import SessionBuilder
from ..work_unit_feed.feed import Provider, Reader, WorkUnitFeed
from ..work_unit_feed.service import FeedService
from .dataframe import DistributedDataFrame, made_on
from .delta import DeltaRegistration, load_delta, register_delta
from .engine import Engine
from .iceberg import IcebergRegistration, load_iceberg, register_iceberg
from .settings import check_changeable, setting_rows, with_setting
from .settings_statements import PREFIX, SetSetting, SettingsStatement, ShowSettings, parse_settings_statement

# EXPLAIN [ANALYZE] [VERBOSE] <query>; `EXPLAIN FORMAT <format> <query>` is left to DataFusion
_EXPLAIN = re.compile(
    r"^\s*explain\s+(?:(analyze)\s+)?(?:(verbose)\s+)?(?!format\s)(.*)$", re.IGNORECASE | re.DOTALL
)
# what a plain EXPLAIN explains distributed: a query. A statement (PREPARE, EXECUTE, CREATE,
# ...) is explained by DataFusion, which plans it without carrying it out
_QUERY = re.compile(r"^\s*(?:select|with|values|\()", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Explain:
    """An `EXPLAIN [ANALYZE] [VERBOSE] <query>` statement, read from its text."""

    query: str
    analyze: bool
    verbose: bool

    @staticmethod
    def parse(text: str) -> Explain | None:
        """The statement `text` is, or None when it is no such EXPLAIN."""
        match = _EXPLAIN.match(text)
        if match is None:
            return None
        analyze = match.group(1) is not None
        if not analyze and not _QUERY.match(match.group(3)):
            return None
        return Explain(match.group(3), analyze, match.group(2) is not None)


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


def _raise_if_path_missing(method: Callable[..., Any], args: tuple, kwargs: dict, exc: Exception) -> None:
    """FileNotFoundError naming the path, when `method` (a SessionContext call reading files)
    failed with `exc` because its local `path` does not exist: DataFusion says so only in a
    bare Exception's text, which a user cannot catch apart from any other failure."""
    try:
        path = inspect.signature(method).bind(None, *args, **kwargs).arguments.get("path")
    except TypeError:
        return
    missing = missing_local_path(path)
    if missing is not None:
        raise FileNotFoundError(
            errno.ENOENT, f"{method.__name__}: no such file or directory", missing
        ) from exc


def _on_ctx_reading(
    method: Callable[Concatenate[SessionContext, P], R],
) -> Callable[Concatenate[DistributedContext, P], R]:
    """`method` of SessionContext registering files as a table, called on the wrapped context
    (its signature and docstring): a missing local path raises FileNotFoundError naming it,
    DataFusion's other errors become QueryFailed, as the `read_*` calls raise."""

    @functools.wraps(method)
    def on_ctx(self: DistributedContext, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return getattr(self.ctx, method.__name__)(*args, **kwargs)
        except Exception as exc:  # DataFusion raises plain Exception
            _raise_if_path_missing(method, args, kwargs, exc)
            raise QueryFailed.of(exc) from (None if said_all(exc) else exc)

    on_ctx.__qualname__ = f"DistributedContext.{method.__name__}"
    return on_ctx


def _on_engine(
    method: Callable[Concatenate[Engine, P], R],
) -> Callable[Concatenate[DistributedContext, P], R]:
    """`method` of the context's Engine, called on it: its signature and docstring."""

    @functools.wraps(method)
    def on_engine(self: DistributedContext, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self._engine, *args, **kwargs)

    on_engine.__qualname__ = f"DistributedContext.{method.__name__}"
    return on_engine


def _made_on_ctx(
    method: Callable[Concatenate[SessionContext, P], DataFrame],
) -> Callable[Concatenate[DistributedContext, P], DistributedDataFrame]:
    """`method`, a SessionContext call that makes a DataFrame, made on the wrapped context and
    returned distributed; DataFusion's errors become QueryFailed, a missing local `path`
    FileNotFoundError naming it."""

    @functools.wraps(method)
    def made_on_ctx(self: DistributedContext, *args: P.args, **kwargs: P.kwargs) -> DistributedDataFrame:
        try:
            return self._frame(getattr(self.ctx, method.__name__), *args, **kwargs)
        except QueryFailed as exc:
            _raise_if_path_missing(method, args, kwargs, exc)
            raise

    made_on_ctx.__qualname__ = f"DistributedContext.{method.__name__}"
    made_on_ctx.__doc__ = (
        f"DataFusion's `SessionContext.{method.__name__}`, as a DistributedDataFrame.\n\n"
        + inspect.cleandoc(method.__doc__ or "")
    )
    signature = inspect.signature(method).replace(return_annotation=DistributedDataFrame)
    made_on_ctx.__signature__ = signature  # type: ignore[attr-defined]  # what help() and IDEs show
    return made_on_ctx


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
            worker, and once for the head stages of this context's queries). With a hook, scans
            through object stores registered only on `ctx` stay distributed (the hook may
            register them where tasks run); without one they run on one node.
        handlers: event handlers (see `events`), asked before the built-in ones: task counts,
            task routing, lifecycle events; and, on the embedded cluster's workers, plan rewrites.
        progress: show a live progress line while queries run (only on a terminal or in a
            notebook). Default: on in a Jupyter notebook, off elsewhere; each call can say
            otherwise.
        extensions: what extends DataFusion for this context's queries, installed on `ctx`,
            on the embedded cluster's workers and on the coordinator's head stage: FFI
            physical extension codecs, extension bundles, installers (a callable taking a
            SessionContext and registering functions or providers on it), or importable names
            `"module:attribute"` of them. Workers started apart take the names (`worker
            --extension`, `LocalCluster(extensions=...)`); a worker given by URL that lacks a
            name given here runs no task (queries run on one node, saying so). See
            docs/extensions.md.

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
        extensions: Sequence[Extension] = (),
    ) -> None:
        shown = running_in_notebook() if progress is None else progress
        self._engine = Engine(
            ctx, workers, config, session_builder, HandlerChain(handlers), shown, extensions
        )
        self.ctx = self._engine.ctx
        self.session_builder = session_builder

    # -- workers and planning ------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """What this context's DataFrames plan and run their queries with."""
        return self._engine

    @property
    def handlers(self) -> HandlerChain:
        """The event handlers of this context's queries (the user's, then the built-in ones)."""
        return self._engine.handlers

    @property
    def progress(self) -> bool:
        """Whether queries show a live progress line unless a call says otherwise."""
        return self._engine.progress

    @progress.setter
    def progress(self, shown: bool) -> None:
        self._engine.progress = shown

    @property
    def config(self) -> DistributedConfig:
        """The config the next query is planned and run with (`SET distributed.<name>` changes it)."""
        return self._engine.config

    @property
    def resolver(self) -> WorkerResolver:
        """Where the workers are: the embedded cluster, the URLs given, or the resolver given."""
        return self._engine.resolver

    @property
    def clients(self) -> ClientPool:
        """The connections to the workers, shared by this context's queries."""
        return self._engine.clients

    @property
    def liveness(self) -> LivenessMonitor:
        """The probes of the workers this context's queries use."""
        return self._engine.liveness

    @property
    def feeds(self) -> FeedService:
        """The service the tasks of work-unit feeds ask for units."""
        return self._engine.feeds

    @property
    def _cluster(self) -> EmbeddedCluster | None:
        """The embedded cluster this context started (None with workers given)."""
        return self._engine._cluster

    local_spools = _on_engine(Engine.local_spools)
    exchange_compression = _on_engine(Engine.exchange_compression)
    workers = _on_engine(Engine.workers)
    planning_session = _on_engine(Engine.planning_session)
    head_session = _on_engine(Engine.head_session)

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

        `EXPLAIN [VERBOSE] <query>` returns the distributed plan, its stages and tasks (of a
        statement such as PREPARE, DataFusion's own: it is planned, not carried out), and
        `EXPLAIN ANALYZE [VERBOSE] <query>` runs the query at once and returns that plan with
        its metrics (columns plan_type and plan, as DataFusion's EXPLAIN has).
        `EXPLAIN FORMAT <format> <query>` is DataFusion's own plan, single-node, as on the
        wrapped context.

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
        explain = Explain.parse(query)
        if explain is not None:
            planned = self.sql(explain.query, options, param_values, **named_params)
            text = planned.explain_string(analyze=explain.analyze, verbose=explain.verbose)
            kind = "Plan with Metrics" if explain.analyze else "distributed_plan"
            return DistributedDataFrame(self, self.ctx.from_pydict({"plan_type": [kind], "plan": [text]}))
        # A DistributedDataFrame given as a table is the DataFusion DataFrame it wraps.
        named = {k: v.df if isinstance(v, DistributedDataFrame) else v for k, v in named_params.items()}
        history_tables = named_tables(query)
        # the query history: a snapshot, in a context of its own; a schema of the user's of that
        # name is theirs, and the statement reads it as DataFusion would
        if history_tables and HISTORY_SCHEMA not in self.ctx.catalog().schema_names():
            tables = tables_context(self._engine.history, self._engine.worker_status, history_tables)
            frame = self._frame(tables.sql, query, options, param_values, **named)
        else:
            frame = self._frame(self.ctx.sql, query, options, param_values, **named)
        frame.sql_text = query
        return frame

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
            with self._engine.config_lock:
                if isinstance(statement, SetSetting):
                    value, quoted = statement.value, statement.quoted
                    if not quoted and value.startswith("$") and value[1:] in named_params:
                        value = str(named_params[value[1:]])  # as DataFusion replaces `$name`
                    self._engine.use_config(with_setting(self.config, statement.name, value, quoted))
                else:
                    check_changeable(statement.name)
                    initial = getattr(self._engine.initial_config, statement.name)
                    self._engine.use_config(dataclasses.replace(self.config, **{statement.name: initial}))
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

    def _frame(self, make: Callable[..., DataFrame], *args: Any, **kwargs: Any) -> DistributedDataFrame:
        """A DataFrame made on the wrapped context, distributed."""
        return made_on(self._engine, make, *args, **kwargs)

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
    register_parquet = _on_ctx_reading(SessionContext.register_parquet)
    register_csv = _on_ctx_reading(SessionContext.register_csv)
    register_json = _on_ctx_reading(SessionContext.register_json)
    register_arrow = _on_ctx_reading(SessionContext.register_arrow)
    register_avro = _on_ctx_reading(SessionContext.register_avro)
    register_listing_table = _on_ctx_reading(SessionContext.register_listing_table)
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

    def register_delta(
        self,
        name: str,
        table: Any,
        version: int | str | datetime | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> DeltaRegistration:
        """Register a Delta Lake table as `name`, read at one snapshot with its scan split
        across tasks (needs the `[delta]` extra; see docs/lakehouse.md).

        Args:
            table: the table's URI or path, or a `deltalake.DeltaTable`.
            version: the snapshot: a version number, a timestamp (a datetime or an ISO 8601
                string: the version then current), or None for the latest.
            storage_options: deltalake's options for the table's object store.

        Returns:
            The version registered, its number of live files, and why it is read on one node
            ("" when it is not: a table with deletion vectors is read by deltalake itself).
        """
        try:
            snapshot = load_delta(table, version, storage_options)
        except ImportError:
            raise
        except Exception as exc:  # deltalake's errors: no table there, no such version
            raise QueryFailed(f"Delta table {table!s}: {exc}") from exc
        return register_delta(self.ctx, name, snapshot, self._engine.file_statistics)

    def register_iceberg(
        self, name: str, table: Any, snapshot_id: int | None = None, catalog: Any = None
    ) -> IcebergRegistration:
        """Register an Apache Iceberg table as `name`, read at one snapshot with its scan split
        across tasks (needs the `[iceberg]` extra; see docs/lakehouse.md).

        Args:
            table: a pyiceberg `Table`, or its identifier ("namespace.table") in `catalog`.
            snapshot_id: the snapshot to read; None for the table's current one.
            catalog: the pyiceberg catalog a table given by identifier is loaded from.

        Returns:
            The snapshot registered, its number of data files, and why it was read into
            memory by pyiceberg ("" when its scan is distributed: a snapshot with delete files
            is read so).
        """
        try:
            loaded = load_iceberg(table, catalog)
            return register_iceberg(self.ctx, name, loaded, snapshot_id, self._engine.file_statistics)
        except (ImportError, ValueError):
            raise
        except Exception as exc:  # pyiceberg's errors: no such table or snapshot
            raise QueryFailed(f"Iceberg table {table!s}: {exc}") from exc

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
                session hook, or on `ctx` alone: queries reading them then run on one node).
            ValueError: the URL is not the store's.
        """
        store = store_for_url(schema + (host or ""), store)
        store.register(self.ctx)
        self._engine.add_object_store(store)

    @property
    def object_stores(self) -> ObjectStores:
        """The stores registered with `register_object_store`, sent with every task."""
        return self._engine.object_stores

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
        stages (or keep it on one node when it cannot travel faithfully; see `choose_plan`)."""
        return self._engine.plan(df).plan

    # -- watching queries ---------------------------------------------------------------------
    @property
    def dashboard_url(self) -> str | None:
        """The URL of the live dashboard of this context's queries, stages, tasks and workers
        (`DistributedConfig.dashboard_port`); None when it is off.

        On an address other than loopback, the URL carries a key made from the cluster's
        token, valid for ten minutes: read the property again for a fresh one.
        """
        dashboard = self._engine.dashboard
        return dashboard.url if dashboard is not None else None

    def on_progress(self, fn: Callable[[Progress], object]) -> Callable[[Progress], object]:
        """Call `fn(progress)` while each query of this context runs, a few times a second,
        and once more when it ends (`progress.done`), as PySpark's `registerProgressHandler`.

        `progress` is a `Progress`: the query id, stages done and in all, tasks running and
        done, rows and bytes written so far, seconds, and its state. The calls come from a
        thread of their own: a slow `fn` delays only the next call, never the query, and an
        exception it raises is logged. Returns `fn`, so it can be used as a decorator.

        Examples:
            >>> dctx = DistributedContext()
            >>> seen = []
            >>> _ = dctx.on_progress(seen.append)
            >>> dctx.sql("SELECT 1 AS one").to_pylist()
            [{'one': 1}]
            >>> import time; time.sleep(0.6)
            >>> seen[-1].done, seen[-1].state, seen[-1].stages_done
            (True, 'finished', 1)
        """
        self._engine.progress_callbacks.add(fn)
        return fn

    def remove_progress(self, fn: Callable[[Progress], object]) -> bool:
        """Stop calling `fn` (given to `on_progress`); returns whether it was registered."""
        return self._engine.progress_callbacks.remove(fn)

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether `close()` was called: queries then raise `ContextClosed`."""
        return self._engine.closed

    def close(self) -> None:
        """Stop the embedded cluster (if any) and close connections to workers; later queries
        raise `ContextClosed`. Closing again does nothing."""
        self._engine.close()

    def __enter__(self) -> DistributedContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
