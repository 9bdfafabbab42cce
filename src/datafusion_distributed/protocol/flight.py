"""Arrow Flight transport: the calls a coordinator or a worker makes to a worker.

Actions: `run_task` (a RunTask message; answers a TaskResult), `release` (drop a query's spool
data), `cancel` (stop a query's tasks and drop its data), `health` (version and spool state).
Calls carry the cluster's token and use TLS for `grpc+tls://` URLs (see `protocol.auth`). `do_get` with a Ticket streams one task output.
Transport failures become `WorkerUnreachable` naming the URL; errors a worker reports become
`WorkerError` carrying the worker's message.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.flight as flight

from .auth import connect_options, is_tls_failure
from .messages import PROTOCOL_VERSION, RunTask, TaskResult, Ticket, decode_task_result, encode


class WorkerUnreachable(ConnectionError):
    """A worker did not answer (down, wrong address, or timed out)."""

    def __init__(self, url: str, detail: str):
        super().__init__(f"worker {url} is unreachable: {detail}")
        self.url = url


class WorkerTimeout(TimeoutError):
    """A call to a worker took longer than its deadline (the worker may still be alive)."""

    def __init__(self, url: str, seconds: float):
        super().__init__(f"worker {url} did not answer within {seconds:g}s")
        self.url = url


class WorkerError(RuntimeError):
    """A worker answered with an error (a task failed, or it refused a message).

    `lost_worker` names another worker the task could not reach (to fetch an input), when that
    is why it failed: the worker says so in the error's extra info, not in its text."""

    def __init__(self, url: str, detail: str, lost_worker: str | None = None):
        super().__init__(f"worker {url}: {detail}")
        self.url = url
        self.detail = detail
        self.lost_worker = lost_worker


def lost_worker_info(url: str) -> bytes:
    """The extra info a worker attaches to an error caused by losing worker `url`."""
    return json.dumps({"lost_worker": url}).encode()


def lost_worker(exc: BaseException | None) -> str | None:
    """The worker whose loss caused `exc`, if any: the one that did not answer, or the one a
    worker could not reach to fetch an input (its error's extra info), found anywhere in the
    chain of exceptions `exc` was raised from or while handling."""
    while exc is not None:
        if isinstance(exc, WorkerUnreachable):
            return exc.url
        if isinstance(exc, WorkerError) and exc.lost_worker:
            return exc.lost_worker
        exc = exc.__cause__ if exc.__cause__ is not None or exc.__suppress_context__ else exc.__context__
    return None


def _lost_worker(exc: flight.FlightError) -> str | None:
    try:
        info = json.loads(exc.extra_info or b"{}")
    except ValueError:
        return None
    lost = info.get("lost_worker") if isinstance(info, dict) else None
    return lost if isinstance(lost, str) else None


def _server_message(exc: flight.FlightError) -> str:
    text = str(exc)
    # Flight appends gRPC details after the message; keep the worker's own words.
    return text.split(". Detail:")[0].split("\ngRPC client debug context")[0]


@dataclass(frozen=True)
class ClientSettings:
    """How a coordinator or worker calls workers: its deadlines, token and trusted CAs.

    Attributes:
        timeout: seconds a short call (release, cancel, health) may take.
        task_timeout: seconds a task may run, and a whole output stream or file copy may take.
        auth_token: the cluster's token, sent with every call (None: no token).
        tls_root_certs: PEM of the CAs to trust for `grpc+tls://` workers (None: the system's).
    """

    timeout: float = 30.0
    task_timeout: float = 600.0
    auth_token: str | None = field(default=None, repr=False)
    tls_root_certs: bytes | None = None


class WorkerClient:
    """Calls to one worker; thread-safe, one Flight connection per client."""

    def __init__(self, url: str, settings: ClientSettings | None = None):
        self.url = url
        self.settings = settings or ClientSettings()
        self._connect_options = connect_options(self.settings.auth_token, self.settings.tls_root_certs)
        self._client: flight.FlightClient | None = None
        self._lock = threading.Lock()

    def _flight(self) -> flight.FlightClient:
        with self._lock:
            if self._client is None:
                try:
                    self._client = flight.connect(self.url, **self._connect_options)
                except (flight.FlightError, pa.ArrowException, OSError) as exc:
                    raise WorkerUnreachable(self.url, str(exc)) from exc
            return self._client

    def _call(self, fn, timeout: float):
        try:
            return fn(self._flight(), flight.FlightCallOptions(timeout=timeout))
        except (flight.FlightError, OSError) as exc:
            raise self._translate(exc, timeout) from exc

    def _translate(self, exc: Exception, timeout: float) -> Exception:
        """The error a failed call (or a stream failing part way) raises to the coordinator."""
        if isinstance(exc, flight.FlightTimedOutError):
            return WorkerTimeout(self.url, timeout)
        if isinstance(exc, flight.FlightUnavailableError):
            if is_tls_failure(str(exc)):  # a setup error: retrying elsewhere would not help
                return WorkerError(self.url, f"TLS handshake failed: {_server_message(exc)}")
            return WorkerUnreachable(self.url, _server_message(exc))
        if isinstance(exc, flight.FlightError):
            return WorkerError(self.url, _server_message(exc), _lost_worker(exc))
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

    def health(self) -> dict:
        """The worker's protocol version and spool state."""
        return json.loads(self._action("health", b"", self.settings.timeout))

    def stream(self, ticket: Ticket) -> Iterator[pa.RecordBatch]:
        """The batches of one task output partition.

        The deadline covers the whole stream, so it is the task timeout: a slow reader is not
        a dead worker."""
        reader = self._call(
            lambda c, o: c.do_get(flight.Ticket(encode(ticket)), o), self.settings.task_timeout
        )
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return
            except flight.FlightError as exc:
                raise self._translate(exc, self.settings.task_timeout) from exc
            yield chunk.data

    def fetch_to_file(self, ticket: Ticket, path: str, expected_size: int) -> int:
        """Copy one task output file, byte for byte (batches stay compressed), to `path`."""

        def call(client, options):
            written = 0
            with open(path, "wb") as out:
                for result in client.do_action(flight.Action("read_output", encode(ticket)), options):
                    written += out.write(result.body)
            return written

        size = self._call(call, self.settings.task_timeout)
        if size != expected_size:
            raise WorkerError(self.url, f"output {ticket} arrived with {size} of {expected_size} bytes")
        return size

    def close(self) -> None:
        """Close the connection; a later call opens a new one."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class ClientPool:
    """One WorkerClient per URL, shared by every query of a coordinator or worker."""

    def __init__(self, settings: ClientSettings | None = None):
        self.settings = settings or ClientSettings()
        self._clients: dict[str, WorkerClient] = {}
        self._lock = threading.Lock()

    def get(self, url: str) -> WorkerClient:
        """The client of worker `url`, made on first use."""
        with self._lock:
            if url not in self._clients:
                self._clients[url] = WorkerClient(url, self.settings)
            return self._clients[url]

    def close(self) -> None:
        """Close every client's connection and forget them."""
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
