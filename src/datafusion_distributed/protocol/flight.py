"""Arrow Flight transport: the calls a coordinator or a worker makes to a worker.

Actions: `run_task` (a RunTask message; answers a TaskResult), `release` (drop a query's spool
data), `cancel` (stop a query's tasks and drop its data), `cancel_attempt` (a TaskKey: stop one
task attempt and drop its outputs), `health` (version and spool state),
`heartbeat` (a coordinator's liveness probe, renewing its queries' spool leases; a draining
worker answers that it drains), `drain` (take no new task: see `worker.drain`). A task a draining
worker refuses raises `WorkerDraining`.
`do_put` with a ShipPartition stores one partition of a memory table the coordinator ships.
Calls carry the cluster's token and use TLS for `grpc+tls://` URLs (see `protocol.auth`). `do_get` with a Ticket streams one task output.
Transport failures become `WorkerUnreachable` naming the URL; errors a worker reports become
`WorkerError` carrying the worker's message; a copy this side cannot write raises
`LocalWriteError` (never a lost worker).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.flight as flight

from ..common.errors import server_message
from ..errors import WorkerDraining, WorkerError, WorkerTimeout, WorkerUnreachable
from .auth import CLIENT_CERTIFICATE_REFUSED, connect_options, is_client_certificate_refused, is_tls_failure
from .messages import (
    PROTOCOL_VERSION,
    Heartbeat,
    PartitionResult,
    RunTask,
    ShipPartition,
    TaskKey,
    TaskResult,
    Ticket,
    decode_partition_result,
    decode_task_result,
    encode,
)


class LocalWriteError(RuntimeError):
    """This process could not write a file it copies from a worker (a full disk, no permission,
    a read-only file system): an error of this side, never a lost worker.

    `writer` names this side in the message ("the coordinator", "worker <url>")."""

    def __init__(self, path: str, error: OSError, writer: str = "this process") -> None:
        reason = f"[Errno {error.errno}] {error.strerror}" if error.errno and error.strerror else str(error)
        super().__init__(f"{writer} could not write its input copy {path}: {reason}")
        self.path = path
        self.error = error
        self.writer = writer


def lost_worker_info(url: str) -> bytes:
    """The extra info a worker attaches to an error caused by losing worker `url`."""
    return json.dumps({"lost_worker": url}).encode()


def lost_worker(exc: BaseException | None) -> str | None:
    """The worker whose loss caused `exc`, if any: the one that did not answer, or the one a
    worker could not reach to fetch an input (its error's extra info), found anywhere in the
    chain of exceptions `exc` was raised from or while handling. A file this side could not
    write (`LocalWriteError`) is never a loss, whatever it was raised while handling."""
    while exc is not None:
        if isinstance(exc, LocalWriteError):
            return None
        if isinstance(exc, WorkerUnreachable):
            return exc.url
        if isinstance(exc, WorkerError) and exc.lost_worker:
            return exc.lost_worker
        exc = exc.__cause__ if exc.__cause__ is not None or exc.__suppress_context__ else exc.__context__
    return None


def draining_worker(exc: BaseException | None) -> str | None:
    """The worker that refused the work of `exc` because it is draining, if that is what `exc` is."""
    return exc.url if isinstance(exc, WorkerDraining) else None


def _info(exc: flight.FlightError, name: str) -> str | None:
    """A text field of the extra info a worker attached to its error."""
    try:
        info = json.loads(exc.extra_info or b"{}")
    except ValueError:
        return None
    value = info.get(name) if isinstance(info, dict) else None
    return value if isinstance(value, str) else None


def _lost_worker(exc: flight.FlightError) -> str | None:
    return _info(exc, "lost_worker")


@dataclass(frozen=True)
class ClientConfig:
    """How a coordinator or worker calls workers: its deadlines, token and trusted CAs.

    Attributes:
        timeout: seconds a short call (release, cancel, health) may take.
        task_timeout: seconds a task may run, and a whole output stream or file copy may take.
        auth_token: the cluster's token, sent with every call (None: no token).
        tls_root_certs: PEM of the CAs to trust for `grpc+tls://` workers (None: the system's).
        tls_client_cert, tls_client_key: PEM certificate and private key presented to workers
            that require client certificates (mutual TLS); None presents none.
    """

    timeout: float = 30.0
    task_timeout: float = 600.0
    auth_token: str | None = field(default=None, repr=False)
    tls_root_certs: bytes | None = None
    tls_client_cert: bytes | None = None
    tls_client_key: bytes | None = field(default=None, repr=False)


class WorkerClient:
    """Calls to one worker; thread-safe, one Flight connection per client."""

    def __init__(self, url: str, settings: ClientConfig | None = None) -> None:
        self.url = url
        self.settings = settings or ClientConfig()
        s = self.settings
        self._connect_options = connect_options(
            s.auth_token, s.tls_root_certs, s.tls_client_cert, s.tls_client_key
        )
        self._client: flight.FlightClient | None = None
        self._calls: dict[flight.FlightClient, int] = {}  # calls in progress on each connection
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[flight.FlightClient]:
        """The connection, held for one call (or one whole stream): `close()` closes a
        connection only once no call uses it, since closing it under a call crashes the process."""
        with self._lock:
            if self._client is None:
                try:
                    self._client = flight.connect(self.url, **self._connect_options)
                except (flight.FlightError, pa.ArrowException, OSError) as exc:
                    raise WorkerUnreachable(self.url, str(exc)) from exc
            client = self._client
            self._calls[client] = self._calls.get(client, 0) + 1
        try:
            yield client
        finally:
            with self._lock:
                self._calls[client] -= 1
                retired = self._calls[client] == 0 and client is not self._client
                if self._calls[client] == 0:
                    del self._calls[client]
            if retired:  # closed while this call used it: the last call closes it
                client.close()

    def _call(self, fn, timeout: float):
        try:
            with self._connection() as client:
                return fn(client, flight.FlightCallOptions(timeout=timeout))
        except (flight.FlightError, OSError) as exc:
            raise self._translate(exc, timeout) from exc

    def _translate(self, exc: Exception, timeout: float) -> Exception:
        """The error a failed call (or a stream failing part way) raises to the coordinator."""
        if isinstance(exc, flight.FlightTimedOutError):
            return WorkerTimeout(self.url, timeout)
        if isinstance(exc, flight.FlightCancelledError):
            # Nothing here cancels its own calls: the worker's server did, as it stopped.
            return WorkerUnreachable(self.url, f"the worker stopped during the call ({server_message(exc)})")
        if isinstance(exc, flight.FlightUnavailableError):
            if is_tls_failure(str(exc)):  # a setup error: retrying elsewhere would not help
                return WorkerError(self.url, f"TLS handshake failed: {server_message(exc)}")
            if self.url.startswith("grpc+tls://") and is_client_certificate_refused(str(exc)):
                detail = f"{CLIENT_CERTIFICATE_REFUSED}: {server_message(exc)}"
                return WorkerError(self.url, f"TLS handshake failed: {detail}")
            return WorkerUnreachable(self.url, server_message(exc))
        if isinstance(exc, flight.FlightError):
            if _info(exc, "draining") is not None:
                return WorkerDraining(self.url, server_message(exc))
            return WorkerError(self.url, server_message(exc), _lost_worker(exc))
        return WorkerUnreachable(self.url, str(exc))

    def _action(self, name: str, body: bytes, timeout: float) -> bytes:
        def call(client, options):
            results = list(client.do_action(flight.Action(name, body), options))
            return results[0].body.to_pybytes() if results else b""

        return self._call(call, timeout)

    def run_task(self, message: RunTask) -> TaskResult:
        """Run one task on the worker and wait for it (up to the task timeout); its outputs stay in the worker's spool."""
        return decode_task_result(self._action("run_task", encode(message), self.settings.task_timeout))

    def _query_action(self, name: str, query_id: str) -> None:
        body = json.dumps({"version": PROTOCOL_VERSION, "query_id": query_id}).encode()
        self._action(name, body, self.settings.timeout)

    def release(self, query_id: str) -> None:
        """Tell the worker that a query is done, so it deletes the query's spool data."""
        self._query_action("release", query_id)

    def cancel(self, query_id: str) -> None:
        """Stop a query's running tasks (within a second) and delete its spool data."""
        self._query_action("cancel", query_id)

    def cancel_attempt(self, key: TaskKey) -> None:
        """Stop one task attempt (within a second) and delete its outputs; the query goes on."""
        self._action("cancel_attempt", encode(key), self.settings.timeout)

    def close_stage(self, query_id: str, stage: int) -> None:
        """Tell the worker that stage `stage`'s streams have no reader any more."""
        self._action("close_stage", encode(TaskKey(query_id, stage, 0, 0)), self.settings.timeout)

    def health(self) -> dict:
        """The worker's protocol version and spool state."""
        return json.loads(self._action("health", b"", self.settings.timeout))

    def heartbeat(self, query_ids: tuple[str, ...], timeout: float) -> bool:
        """Probe that the worker answers within `timeout` seconds, renewing the spool leases of
        `query_ids` there; whether it is draining (it takes no new task). Raises WorkerTimeout
        or WorkerUnreachable when it does not answer."""
        answer = self._action("heartbeat", encode(Heartbeat(tuple(query_ids))), timeout)
        try:
            return bool(answer) and json.loads(answer).get("draining") is True
        except (ValueError, AttributeError):  # not this version's answer: serving
            return False

    def drain(self) -> dict:
        """Ask the worker to drain (take no new task, finish its running ones, serve its outputs
        until released, then exit); its `health` as it begins."""
        return json.loads(self._action("drain", b"", self.settings.timeout) or b"{}")

    def stream(self, ticket: Ticket) -> Iterator[pa.RecordBatch]:
        """The batches of one task output partition.

        The deadline covers the whole stream, so it is the task timeout: a slow reader is not
        a dead worker."""
        timeout = self.settings.task_timeout
        with self._connection() as client:
            try:
                reader = client.do_get(
                    flight.Ticket(encode(ticket)), flight.FlightCallOptions(timeout=timeout)
                )
            except (flight.FlightError, OSError) as exc:
                raise self._translate(exc, timeout) from exc
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    return
                except flight.FlightError as exc:
                    raise self._translate(exc, timeout) from exc
                yield chunk.data

    def put_partition(
        self, message: ShipPartition, batches: Iterable[pa.RecordBatch]
    ) -> tuple[PartitionResult, pa.Schema | None]:
        """Store `batches`, one partition of a shipped memory table, in the worker's spool
        (`do_put`); returns where the worker keeps them and their schema. A partition of no
        batch is not sent: it has no file (path None), as an empty output partition has none.

        The deadline covers the whole upload, so it is the task timeout."""
        batches = iter(batches)
        first = next(batches, None)
        if first is None:
            return PartitionResult(message.partition, 0, 0, None), None
        options = pa.ipc.IpcWriteOptions(compression=message.compression)

        def call(client, call_options):
            descriptor = flight.FlightDescriptor.for_command(encode(message))
            writer, reader = client.do_put(descriptor, first.schema, call_options)
            try:
                writer.write_batch(first)
                for batch in batches:
                    writer.write_batch(batch)
                writer.done_writing()
                answer = reader.read()
            finally:
                writer.close()
            if answer is None:
                raise flight.FlightServerError("the worker stored the partition without answering")
            return answer.to_pybytes()

        timeout = self.settings.task_timeout
        call_options = flight.FlightCallOptions(timeout=timeout, write_options=options)
        try:
            with self._connection() as client:
                answer = call(client, call_options)
        except (flight.FlightError, OSError) as exc:
            raise self._translate(exc, timeout) from exc
        return decode_partition_result(answer), first.schema

    def fetch_to_file(self, ticket: Ticket, path: str, expected_size: int) -> int:
        """Copy one task output file, byte for byte (batches stay compressed), to `path`.

        Writing `path` failing raises `LocalWriteError`: an error of this side, not the worker's."""

        def call(client, options):
            with _CopyTarget(path) as out:
                for result in client.do_action(flight.Action("read_output", encode(ticket)), options):
                    out.write(result.body)
            return out.written

        size = self._call(call, self.settings.task_timeout)
        if size != expected_size:
            raise WorkerError(self.url, f"output {ticket} arrived with {size} of {expected_size} bytes")
        return size

    def close(self) -> None:
        """Close the connection (once the calls using it end); a later call opens a new one."""
        with self._lock:
            client, self._client = self._client, None
            idle = client is not None and client not in self._calls
        if idle and client is not None:
            client.close()


class _CopyTarget:
    """The local file a copy is written to: its own errors (OSError on open, write or close)
    become `LocalWriteError`, so they are never taken for a failure of the worker copied from."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.written = 0
        self._file = self._local(open, path, "wb")

    def _local(self, fn, *args):
        try:
            return fn(*args)
        except OSError as exc:
            raise LocalWriteError(self.path, exc) from exc

    def write(self, data) -> None:
        self.written += self._local(self._file.write, data)

    def __enter__(self) -> _CopyTarget:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._local(self._file.close)  # the last bytes are written here
        else:  # the copy failed already: its file is discarded, that error is the one to tell
            with contextlib.suppress(OSError):
                self._file.close()


class ClientPool:
    """One WorkerClient per URL, shared by every query of a coordinator or worker."""

    def __init__(self, settings: ClientConfig | None = None) -> None:
        self.settings = settings or ClientConfig()
        self._clients: dict[str, WorkerClient] = {}
        self._lock = threading.Lock()

    def get(self, url: str) -> WorkerClient:
        """The client of worker `url`, made on first use."""
        with self._lock:
            if url not in self._clients:
                self._clients[url] = WorkerClient(url, self.settings)
            return self._clients[url]

    def set_deadlines(self, timeout: float, task_timeout: float) -> None:
        """Use these deadlines (`ClientConfig.timeout`, `task_timeout`) for every call made
        from now on, on the connections already open too; calls under way keep theirs."""
        with self._lock:
            self.settings = replace(self.settings, timeout=timeout, task_timeout=task_timeout)
            for client in self._clients.values():
                client.settings = self.settings  # read by each call; the connection is unchanged

    def close(self) -> None:
        """Close every client's connection (each once the calls using it end) and forget them."""
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
