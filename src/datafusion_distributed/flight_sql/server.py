"""An Arrow Flight SQL endpoint: any Flight SQL client (the ADBC driver, JDBC, BI tools) runs
SQL distributed over the server's cluster.

It is pyarrow's Flight server speaking the Flight SQL commands of `messages`:

- a query (`CommandStatementQuery`) is planned by GetFlightInfo in the client's session and
  run when its ticket is read (DoGet), its result streamed batch by batch as the query makes it;
- DDL and `SET` run in the client's own session; `CommandStatementUpdate` (DoPut) too, and
  answers the rows it changed;
- prepared statements take `$1`, `$2`, ... parameters, bound by DoPut (each bound row one set
  of values; several sets answer together);
- the metadata calls ADBC makes: GetCatalogs, GetDbSchemas, GetTables (with schemas),
  GetTableTypes and GetSqlInfo;
- CancelFlightInfo (and the older CancelQuery) stop a query's tasks; a client that goes away
  in the middle of a result stops it the same way.

A bearer token, when the server has one, is checked before any call does any work; at most
`max_running` queries run at once and `max_queued` more wait, the rest are refused with a
clear error (see `sessions`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
from datafusion import SessionConfig, SessionContext, SQLOptions

from .. import (
    DistributedConfig,
    DistributedContext,
    DistributedDataFrame,
    EmbeddedCluster,
    QueryCancelled,
    QueryFailed,
    WorkerResolver,
)
from ..protocol.auth import TokenServerMiddlewareFactory
from . import metadata
from .messages import CANCELLED, FLIGHT, NOT_CANCELLABLE, SQL, name_of, pack, unpack
from .sessions import Admission, Session, Sessions, Statements

log = logging.getLogger("datafusion_distributed.flight_sql")

EMPTY = pa.schema([])
CLIENT_POLL_SECONDS = 0.1  # how often a query waiting for its first batch checks its client is there
# what DataFusion says when SQLOptions refuse a statement: it changes something when run
_NOT_A_QUERY = ("DDL not supported", "DML not supported", "Statement not supported")


@dataclass(frozen=True)
class ServeOptions:
    """How the server listens and admits.

    `port` 0 picks a free one. `auth_token`: clients must send `authorization: Bearer <token>`.
    `tls`: the server's certificate and key (PEM), for grpc+tls. `init`: statements every new
    session runs first (CREATE EXTERNAL TABLE ..., SET ...). `session_idle_seconds`: a
    connection's session is closed after so long without a call."""

    host: str = "127.0.0.1"
    port: int = 0
    auth_token: str | None = None
    tls: tuple[bytes, bytes] | None = None
    init: Sequence[str] = ()
    max_running: int = 4
    max_queued: int = 32
    session_idle_seconds: float = 3600.0


class FlightSqlServer(fl.FlightServerBase):
    """A Flight SQL server over `workers` (None: an embedded cluster of the config's
    `embedded_workers`, started here and stopped with the server; or URLs, or a resolver),
    each client in a session of its own made with `config`. `serve()` blocks; `shutdown()`
    stops it (from another thread), closing every session."""

    def __init__(
        self,
        workers: Sequence[str] | WorkerResolver | None = None,
        config: DistributedConfig | None = None,
        options: ServeOptions | None = None,
    ) -> None:
        self.options = options or ServeOptions()
        self.config = config or DistributedConfig()
        self.admission = Admission(self.options.max_running, self.options.max_queued)
        self.statements = Statements(self.options.session_idle_seconds)
        self.cluster = EmbeddedCluster(self.config.embedded_workers) if workers is None else None
        self._workers = self.cluster if workers is None else workers
        self.sessions = Sessions(self._new_context, self.options.session_idle_seconds)
        scheme = "grpc+tls" if self.options.tls else "grpc+tcp"
        try:
            self._new_context().close()  # bad init statements fail here, not at every client
            super().__init__(
                f"{scheme}://{self.options.host}:{self.options.port}",
                tls_certificates=[self.options.tls] if self.options.tls else None,
                middleware={"auth": _bearer_token(self.options.auth_token)}
                if self.options.auth_token
                else None,
            )
        except BaseException:
            if self.cluster is not None:
                self.cluster.close()
            raise
        self.location = f"{scheme}://{self.options.host}:{self.port}"

    def _new_context(self) -> DistributedContext:
        """A client's own context over the shared cluster, its init statements run."""
        ctx = SessionContext(SessionConfig().with_information_schema(True)).enable_url_table()
        dctx = DistributedContext(ctx, workers=self._workers, config=self.config)
        try:
            for statement in self.options.init:
                dctx.sql(statement).collect()
        except Exception as exc:
            dctx.close()
            raise fl.FlightServerError(f"the server's init statements failed: {exc}") from exc
        return dctx

    def shutdown(self) -> None:
        """Stop serving, then close every session and the embedded cluster."""
        super().shutdown()
        self.sessions.close()
        if self.cluster is not None:
            self.cluster.close()

    # -- queries ---------------------------------------------------------------------------
    def get_flight_info(
        self, context: fl.ServerCallContext, descriptor: fl.FlightDescriptor
    ) -> fl.FlightInfo:
        """Plan a query (or a prepared one with its parameters), or answer a metadata command:
        its schema, and the ticket DoGet reads it by."""
        session = self.sessions.of(context)
        command = _command(descriptor)
        kind = name_of(command)
        if kind == "CommandStatementQuery":
            df = _planned(lambda: session.dctx.sql(command.query))
        elif kind == "CommandPreparedStatementQuery":
            df = self._bound(session, command.prepared_statement_handle)
        else:
            table = self._metadata(session, command)
            return _info(descriptor, table.schema, self.statements.add(table))
        return _info(descriptor, df.schema(), self.statements.add(df))

    def get_schema(self, context: fl.ServerCallContext, descriptor: fl.FlightDescriptor) -> fl.SchemaResult:
        """The schema a command's result has, without running it."""
        session = self.sessions.of(context)
        command = _command(descriptor)
        kind = name_of(command)
        if kind == "CommandStatementQuery":
            return fl.SchemaResult(_query_schema(session, command.query))
        if kind == "CommandPreparedStatementQuery":
            return fl.SchemaResult(_prepared(session, command.prepared_statement_handle).schema)
        return fl.SchemaResult(self._metadata(session, command).schema)

    def do_get(self, context: fl.ServerCallContext, ticket: fl.Ticket) -> fl.FlightDataStream:
        """Run the query of `ticket` (once), streaming its result as it is made."""
        session = self.sessions.of(context)
        command = unpack_or_invalid(ticket.ticket)
        if name_of(command) != "TicketStatementQuery":
            raise pa.ArrowInvalid(f"a ticket must be a TicketStatementQuery, not a {name_of(command)}")
        handle = command.statement_handle
        try:
            df = self.statements.take(handle)
        except KeyError as exc:
            raise fl.FlightServerError(str(exc.args[0])) from None
        if isinstance(df, pa.Table):  # a metadata answer, made by GetFlightInfo
            self.statements.finished(handle)
            return fl.RecordBatchStream(df)
        batches = self._results(session, df, handle, context)
        try:
            with _stopped_if_gone(context, df):  # the first batch may wait for every task
                first = next(batches, None)  # errors before the first batch are the call's own
        except BaseException:
            batches.close()
            raise
        schema = first.schema if first is not None else df.schema()
        rest = itertools.chain([] if first is None else [first], batches)
        return fl.RecordBatchStream(pa.RecordBatchReader.from_batches(schema, rest))

    def _results(
        self, session: Session, df: DistributedDataFrame, handle: bytes, context: fl.ServerCallContext
    ) -> Generator[pa.RecordBatch, None, None]:
        """`df`'s result, streamed while it holds a turn (and keeps `session` open). Closed
        early (the client went away or cancelled), it stops the query's tasks."""
        try:
            with session.streams(), self.admission.slot(context.is_cancelled):
                stream = df.execute_stream()
                try:
                    yield from _relayed(stream)
                finally:
                    stream.close()
        finally:
            self.statements.finished(handle)

    def _bound(self, session: Session, handle: bytes) -> DistributedDataFrame:
        """The prepared statement `handle` with its bound parameter sets (several answer
        together, in order)."""
        prepared = _prepared(session, handle)
        sets = prepared.parameters.to_pylist() if prepared.parameters is not None else [{}]
        frames = [_planned(functools.partial(_with_values, session, prepared.sql, v)) for v in sets or [{}]]
        first = frames[0]
        for other in frames[1:]:
            first = first.union(other)
        return first

    # -- updates and parameters ------------------------------------------------------------
    def do_put(
        self,
        context: fl.ServerCallContext,
        descriptor: fl.FlightDescriptor,
        reader: fl.MetadataRecordBatchReader,
        writer: fl.FlightMetadataWriter,
    ) -> None:
        """Bind parameters to a prepared statement, or run an update and answer its row count."""
        session = self.sessions.of(context)
        command = _command(descriptor)
        kind = name_of(command)
        if kind == "CommandPreparedStatementQuery":  # parameters bound to a prepared statement
            prepared = _prepared(session, command.prepared_statement_handle)
            prepared.parameters = reader.read_all()
            return
        if kind == "CommandStatementUpdate":
            df = _planned(lambda: session.dctx.sql(command.query))
        elif kind == "CommandPreparedStatementUpdate":
            df = self._bound(session, command.prepared_statement_handle)
        else:
            raise NotImplementedError(f"DoPut of {kind} is not supported")
        with self.admission.slot(context.is_cancelled):
            result = _relayed_call(df.to_arrow_table)
        writer.write(SQL["DoPutUpdateResult"](record_count=_changed_rows(result)).SerializeToString())

    # -- actions ----------------------------------------------------------------------------
    def list_actions(self, context: fl.ServerCallContext) -> list[tuple[str, str]]:
        """The actions `do_action` takes."""
        return [
            ("CreatePreparedStatement", "prepare a statement with $1, $2, ... parameters"),
            ("ClosePreparedStatement", "forget a prepared statement"),
            ("CancelFlightInfo", "stop a query"),
            ("CancelQuery", "stop a query (the older action)"),
        ]

    def do_action(self, context: fl.ServerCallContext, action: fl.Action) -> Iterator[bytes]:
        """Prepare or close a statement, or cancel a query."""
        session = self.sessions.of(context)
        body = action.body.to_pybytes()
        kind = action.type
        if kind == "CreatePreparedStatement":
            request = _expect(unpack_or_invalid(body), "ActionCreatePreparedStatementRequest")
            schema = _query_schema(session, request.query)
            handle = session.prepare(request.query, schema)
            result = SQL["ActionCreatePreparedStatementResult"](
                prepared_statement_handle=handle,
                dataset_schema=schema.serialize().to_pybytes(),
                parameter_schema=EMPTY.serialize().to_pybytes(),  # any values: DataFusion casts them
            )
            return iter([pack(result)])
        if kind == "ClosePreparedStatement":
            request = _expect(unpack_or_invalid(body), "ActionClosePreparedStatementRequest")
            session.prepared.pop(request.prepared_statement_handle, None)
            return iter([])
        if kind == "CancelFlightInfo":
            request = FLIGHT["CancelFlightInfoRequest"]()
            request.ParseFromString(body)
            status = self._cancel(request.info)
            return iter([FLIGHT["CancelFlightInfoResult"](status=status).SerializeToString()])
        if kind == "CancelQuery":
            request = _expect(unpack_or_invalid(body), "ActionCancelQueryRequest")
            return iter([pack(SQL["ActionCancelQueryResult"](result=self._cancel(request.info)))])
        raise NotImplementedError(f"the action {kind!r} is not supported")

    def _cancel(self, info: bytes) -> int:
        """Stop the query of the FlightInfo `info`: CANCELLED, or NOT_CANCELLABLE when it has
        ended (or never was)."""
        try:
            endpoints = fl.FlightInfo.deserialize(info).endpoints
        except Exception as exc:  # pyarrow raises ArrowInvalid or OSError for bytes it cannot read
            raise pa.ArrowInvalid(f"a cancel request without a readable FlightInfo: {exc}") from exc
        found = False
        for endpoint in endpoints:
            if endpoint.ticket.ticket:
                ticket = unpack_or_invalid(endpoint.ticket.ticket)
                found = self.statements.cancel(ticket.statement_handle) or found
        return CANCELLED if found else NOT_CANCELLABLE

    # -- metadata ---------------------------------------------------------------------------
    def _metadata(self, session: Session, command: Any) -> pa.Table:
        ctx = session.dctx.ctx
        kind = name_of(command)
        if kind == "CommandGetCatalogs":
            return metadata.catalogs(ctx)
        if kind == "CommandGetDbSchemas":
            return metadata.db_schemas(
                ctx, _optional(command, "catalog"), _optional(command, "db_schema_filter_pattern")
            )
        if kind == "CommandGetTables":
            return metadata.tables(
                ctx,
                _optional(command, "catalog"),
                _optional(command, "db_schema_filter_pattern"),
                _optional(command, "table_name_filter_pattern"),
                list(command.table_types),
                command.include_schema,
            )
        if kind == "CommandGetTableTypes":
            return metadata.table_types(ctx)
        if kind == "CommandGetSqlInfo":
            return metadata.sql_info(list(command.info))
        raise NotImplementedError(f"{kind} is not supported")


def _bearer_token(token: str) -> TokenServerMiddlewareFactory:
    """Refuses every call without the server's token, as workers refuse calls without theirs."""
    return TokenServerMiddlewareFactory(
        token, hint="send the header 'authorization: Bearer <token>'", owner="this server's"
    )


@contextlib.contextmanager
def _stopped_if_gone(context: fl.ServerCallContext, df: DistributedDataFrame) -> Iterator[None]:
    """Cancel `df` if the client cancels the call, or goes away, while the block runs."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(CLIENT_POLL_SECONDS):
            if context.is_cancelled():
                log.info("a client went away while its query ran: cancelling it")
                df.cancel()
                return

    watcher = threading.Thread(target=watch, name="flight-sql-client-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def unpack_or_invalid(raw: bytes) -> Any:
    """The Flight SQL message of `raw`; a bad one is the client's error (INVALID_ARGUMENT)."""
    try:
        return unpack(raw)
    except ValueError as exc:
        raise pa.ArrowInvalid(str(exc)) from None


def _command(descriptor: fl.FlightDescriptor) -> Any:
    if descriptor.descriptor_type != fl.DescriptorType.CMD:
        raise pa.ArrowInvalid("a Flight SQL server takes command descriptors, not paths")
    return unpack_or_invalid(descriptor.command)


def _expect(command: Any, kind: str) -> Any:
    if name_of(command) != kind:
        raise pa.ArrowInvalid(f"expected a {kind}, not a {name_of(command)}")
    return command


def _optional(command: Any, name: str) -> str | None:
    return getattr(command, name) if command.HasField(name) else None


def _info(descriptor: fl.FlightDescriptor, schema: pa.Schema, handle: bytes) -> fl.FlightInfo:
    """A FlightInfo whose one endpoint (on this server) is the ticket of `handle`."""
    ticket = pack(SQL["TicketStatementQuery"](statement_handle=handle))
    return fl.FlightInfo(schema, descriptor, [fl.FlightEndpoint(ticket, [])], -1, -1)


def _planned(plan: Callable[[], DistributedDataFrame]) -> DistributedDataFrame:
    """`plan()`, its errors (bad SQL, an unknown table or setting) the client's own
    (INVALID_ARGUMENT)."""
    try:
        return plan()
    except (QueryFailed, ValueError) as exc:
        raise pa.ArrowInvalid(str(exc)) from None


def _relayed_call(call: Callable[[], Any]) -> Any:
    """`call()`, the library's errors as Flight errors with their messages."""
    try:
        return call()
    except QueryCancelled as exc:
        raise fl.FlightCancelledError(str(exc)) from None
    except QueryFailed as exc:
        raise fl.FlightServerError(str(exc)) from None
    except ValueError as exc:  # a bad setting (QueryFailed is one too, caught above)
        raise pa.ArrowInvalid(str(exc)) from None


def _relayed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`batches`, the errors raised while they are made relayed as `_relayed_call` does."""
    while True:
        batch = _relayed_call(lambda: next(batches, None))
        if batch is None:
            return
        yield batch


def _query_schema(session: Session, sql: str) -> pa.Schema:
    """The result schema of `sql`, planned without running anything: a statement that changes
    something (DDL, DML, SET) has none until it runs."""
    refuse = SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)
    try:
        return session.dctx.sql(sql, options=refuse).schema()
    except QueryFailed as exc:
        if any(reason in str(exc) for reason in _NOT_A_QUERY):
            return EMPTY
        raise pa.ArrowInvalid(str(exc)) from None


def _prepared(session: Session, handle: bytes) -> Any:
    try:
        return session.prepared_statement(handle)
    except KeyError as exc:
        raise pa.ArrowInvalid(str(exc.args[0])) from None


def _with_values(session: Session, sql: str, values: dict[str, Any]) -> DistributedDataFrame:
    """`sql` planned with one bound row as its placeholders' values: column i is `$i+1`."""
    return session.dctx.sql(sql, param_values={str(i + 1): v for i, v in enumerate(values.values())} or None)


def _changed_rows(result: pa.Table) -> int:
    """What an update's result says it changed: DataFusion's `count` row, else unknown (-1)."""
    if result.num_rows == 1 and result.column_names == ["count"]:
        return int(result.column(0)[0].as_py())
    return -1
