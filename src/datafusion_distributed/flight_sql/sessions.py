"""The server's clients: one session per connection, each a DistributedContext of its own over
the server's one cluster, so that DDL and SET apply to that client only; and the bound on how
many queries run at once.

A connection is told apart by its peer address (gRPC keeps one HTTP/2 connection per client
connection). A session is made on a connection's first call, running the server's init
statements, and closed after it has been idle for the server's idle time, or with the server.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.flight as fl

from .. import DistributedContext, DistributedDataFrame

log = logging.getLogger("datafusion_distributed.flight_sql")


@dataclass
class Prepared:
    """A prepared statement: its SQL, its result's schema (empty for a statement that returns
    no rows), and the parameter sets bound to it (each row one set, column i for `$i+1`)."""

    sql: str
    schema: pa.Schema
    parameters: pa.Table | None = None


@dataclass
class Session:
    """One client connection's context, prepared statements, and when it was last used."""

    key: str
    dctx: DistributedContext
    prepared: dict[bytes, Prepared] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    streaming: int = 0  # results being read: a session is never idle while one streams

    @contextlib.contextmanager
    def streams(self) -> Iterator[None]:
        """Mark a result of this session as being read for the duration of the block."""
        self.streaming += 1
        try:
            yield
        finally:
            self.streaming -= 1
            self.last_used = time.monotonic()

    def prepare(self, sql: str, schema: pa.Schema) -> bytes:
        """Keep `sql` as a prepared statement; its handle."""
        handle = uuid.uuid4().bytes
        self.prepared[handle] = Prepared(sql, schema)
        return handle

    def prepared_statement(self, handle: bytes) -> Prepared:
        """The prepared statement `handle` names.

        Raises:
            KeyError: it was closed, or never made on this connection.
        """
        try:
            return self.prepared[handle]
        except KeyError:
            raise KeyError(
                "no such prepared statement on this connection (closed, or made on another)"
            ) from None


class Sessions:
    """The sessions of the connected clients, made by `make` and idle at most `idle_seconds`."""

    def __init__(self, make: Callable[[], DistributedContext], idle_seconds: float) -> None:
        self._make = make
        self._idle_seconds = idle_seconds
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._making: dict[str, threading.Lock] = {}

    def of(self, context: fl.ServerCallContext) -> Session:
        """The session of the connection `context` is a call of, made on its first call."""
        key = context.peer()
        self._close_idle()
        with self._lock:
            found = self._sessions.get(key)
            making = self._making.setdefault(key, threading.Lock())
        if found is None:
            with making:  # one session per connection, even when its first calls come at once
                with self._lock:
                    found = self._sessions.get(key)
                if found is None:
                    found = Session(key, self._make())
                    log.info("session for %s opened", key)
                    with self._lock:
                        self._sessions[key] = found
        found.last_used = time.monotonic()
        return found

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def contexts(self) -> list[DistributedContext]:
        """The contexts of the open sessions, oldest first."""
        with self._lock:
            return [session.dctx for session in self._sessions.values()]

    def _close_idle(self) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [
                s
                for s in self._sessions.values()
                if not s.streaming and now - s.last_used > self._idle_seconds
            ]
            for session in idle:
                del self._sessions[session.key]
                self._making.pop(session.key, None)
        for session in idle:
            log.info("session for %s closed after %.0f s idle", session.key, self._idle_seconds)
            session.dctx.close()

    def close(self) -> None:
        """Close every session."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.dctx.close()


class Admission:
    """At most `running` queries stream results at once; up to `queued` more wait for a turn,
    and a query past those is refused at once, saying so."""

    def __init__(self, running: int, queued: int) -> None:
        if running < 1 or queued < 0:
            raise ValueError(
                f"max_running must be at least 1 and max_queued at least 0, not {running} and {queued}"
            )
        self.limit, self.queue = running, queued
        self.running = self.waiting = 0
        self._turn = threading.Condition()

    @contextlib.contextmanager
    def slot(self, gone: Callable[[], bool]) -> Iterator[None]:
        """Hold a turn to run a query; `gone` says the client went away while it waited."""
        with self._turn:
            if self.running >= self.limit:
                if self.waiting >= self.queue:
                    raise fl.FlightUnavailableError(
                        f"the server is busy: {self.running} queries are running and {self.waiting} waiting "
                        f"(max_running={self.limit}, max_queued={self.queue}); try again later"
                    )
                self.waiting += 1
                try:
                    while self.running >= self.limit:
                        if gone():
                            raise fl.FlightCancelledError("the client went away while its query waited")
                        self._turn.wait(0.2)
                finally:
                    self.waiting -= 1
            self.running += 1
        try:
            yield
        finally:
            with self._turn:
                self.running -= 1
                self._turn.notify()


@dataclass
class Statements:
    """Queries planned by GetFlightInfo and not yet read (by ticket handle), and those being
    read, so that a cancel finds them wherever they are. A ticket not read within
    `unread_seconds` is forgotten (a client that planned and went away)."""

    unread_seconds: float = 3600.0
    pending: dict[bytes, tuple[DistributedDataFrame | pa.Table, float]] = field(default_factory=dict)
    running: dict[bytes, DistributedDataFrame | pa.Table] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, df: DistributedDataFrame | pa.Table) -> bytes:
        """Keep `df` (a query, or a metadata answer) until its ticket is read; the ticket's
        handle."""
        handle = uuid.uuid4().bytes
        now = time.monotonic()
        with self._lock:
            for old in [h for h, (_, made) in self.pending.items() if now - made > self.unread_seconds]:
                del self.pending[old]
            self.pending[handle] = (df, now)
        return handle

    def take(self, handle: bytes) -> DistributedDataFrame | pa.Table:
        """The query of `handle`, now running.

        Raises:
            KeyError: no query has that ticket (read already, cancelled, or never made).
        """
        with self._lock:
            found = self.pending.pop(handle, None)
            if found is None:
                raise KeyError(
                    "no query has this ticket: it was read already, cancelled, or left unread too long"
                )
            self.running[handle] = found[0]
            return found[0]

    def finished(self, handle: bytes) -> None:
        """The query of `handle` ended (or was never run)."""
        with self._lock:
            self.running.pop(handle, None)

    def cancel(self, handle: bytes) -> bool:
        """Stop the query of `handle`, running or not yet read; whether there was one."""
        with self._lock:
            pending = self.pending.pop(handle, None)
            running = self.running.get(handle)
        if isinstance(running, DistributedDataFrame):
            running.cancel()
        return pending is not None or running is not None
