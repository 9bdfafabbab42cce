"""The worker: an Arrow Flight service that runs tasks and serves their outputs from its spool."""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from ..common.errors import is_failure
from ..common.fs import lies_in, makedirs
from ..common.memory import resident_bytes
from ..common.tokens import TOKEN_ENV, token_from_env
from ..common.version import __version__
from ..events.chain import HandlerChain
from ..protocol.auth import TokenServerMiddlewareFactory, read_pem
from ..protocol.flight import ClientConfig, ClientPool
from ..protocol.messages import (
    PROTOCOL_VERSION,
    PartitionResult,
    ProtocolError,
    RunTask,
    TaskKey,
    TaskResult,
    decode_heartbeat,
    decode_query_id,
    decode_run_task,
    decode_ship_partition,
    decode_task_key,
    decode_ticket,
    encode,
)
from ..runtime import streams
from ..runtime.extensions import Extension, extension_name, load
from ..runtime.outputs import write_partition_file
from ..runtime.session import SessionBuilder, accepts_runtime, task_session
from ..runtime.session_settings import TaskSessions
from .cancellation import Cancellations
from .drain import Drain, TaskRefused, draining_info
from .served import ServedBytes
from .spool import Spool
from .task_runner import TaskRunner

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 * 1024 * 1024


class FlightWorker(flight.FlightServerBase):
    """Runs tasks sent by coordinators and serves their outputs with `do_get`.

    Args:
        host, port: where to listen (port 0 picks a free port; see `url`).
        spool_dir: folder for task outputs and fetched inputs.
        session_builder: hook building the worker's SessionContext (object stores, UDFs, config),
            called once, before the first task; every task runs in that session.
        spool_ttl: seconds after which an abandoned query's spool folder is swept.
        auth_token: the cluster's shared token (default: DATAFUSION_DISTRIBUTED_TOKEN); calls
            without it are refused. Required unless `insecure_no_auth` is True.
        tls_cert, tls_key: PEM certificate and private key (paths or PEM text): serve TLS
            (`grpc+tls://`). tls_root_certs: CAs to trust when fetching from other workers
            (default: `tls_cert` itself, right for one self-signed certificate). The worker
            presents `tls_cert` as its client certificate when it fetches from other workers.
        tls_client_ca: CAs (PEM path or text) whose client certificates this worker requires
            (mutual TLS; needs `tls_cert`): a client without one is refused during the TLS
            handshake, before it can send a request.
        spool_quota_bytes: bytes the spool may hold; a task that would pass it fails.
        memory_limit_bytes: DataFusion memory pool (a fair spill pool) shared by all the tasks
            this worker runs at once.
        handlers: event handlers whose `rewrite_plan` may replace a task's plan before it runs.
        shared_spool_root: a folder holding the spools of workers on this host (this one's
            included): their outputs are read from disk where they are instead of fetched.
        data_plane_port: the port its streamed exchanges are served on (0: a free one), when
            it serves them (not with TLS, a memory limit, a session hook or plan rewrites).
        extensions: user extensions installed on the session tasks run in (codecs, extension
            bundles, installers, or their importable names; see docs/extensions.md), loaded at
            once so that a bad one fails here; their names are reported by `health`.
    """

    def __init__(
        self,
        spool_dir: str,
        host: str = "127.0.0.1",
        port: int = 0,
        session_builder: SessionBuilder | None = None,
        spool_ttl: float = 3600.0,
        fetch_timeout: float = 60.0,
        *,
        auth_token: str | None = None,
        insecure_no_auth: bool = False,
        tls_cert: str | bytes | None = None,
        tls_key: str | bytes | None = None,
        tls_root_certs: str | bytes | None = None,
        tls_client_ca: str | bytes | None = None,
        spool_quota_bytes: int | None = None,
        memory_limit_bytes: int | None = None,
        handlers: Sequence[Any] | None = None,
        shared_spool_root: str | None = None,
        data_plane_port: int = 0,
        extensions: Sequence[Extension] = (),
    ) -> None:
        for extension in extensions:
            load(extension)  # ExtensionError now, naming it, rather than at the first task
        auth_token = auth_token or token_from_env()
        if auth_token is None and not insecure_no_auth:
            raise ValueError(
                "a worker needs an authentication token: give it one (auth_token, --auth-token or "
                f"{TOKEN_ENV}), or pass insecure_no_auth=True (--insecure-no-auth) to accept plans, "
                "which can carry Python code, from anyone who can reach it"
            )
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("TLS needs both a certificate and its private key (tls_cert and tls_key)")
        if tls_client_ca is not None and tls_cert is None:
            raise ValueError(
                "client certificates (tls_client_ca) need the worker to serve TLS: give tls_cert and tls_key"
            )
        if memory_limit_bytes is not None and memory_limit_bytes <= 0:
            raise ValueError("memory_limit_bytes must be positive")
        if memory_limit_bytes is not None and session_builder and not accepts_runtime(session_builder):
            raise ValueError("memory_limit_bytes needs a session hook that accepts a `runtime` keyword")
        cert, key, client_ca = read_pem(tls_cert), read_pem(tls_key), read_pem(tls_client_ca)
        scheme = "grpc+tls" if cert else "grpc"
        super().__init__(
            f"{scheme}://{host}:{port}",
            tls_certificates=[flight.CertKeyPair(cert, key)] if cert else None,
            verify_client=client_ca is not None,
            root_certificates=client_ca,
            middleware={"auth": TokenServerMiddlewareFactory(auth_token)} if auth_token else None,
        )
        self.host = host
        self.url = f"{scheme}://{host}:{self.port}"
        self.authenticated = auth_token is not None
        self.extensions = tuple(extension_name(e) for e in extensions)
        self.memory_limit_bytes = memory_limit_bytes
        self.spool = Spool(spool_dir, spool_ttl, spool_quota_bytes)
        self._cancelled = Cancellations(spool_ttl)
        self.served = ServedBytes()  # what left this worker over Flight (reported by `health`)
        self._stopped = threading.Event()
        self._clients = ClientPool(
            ClientConfig(
                timeout=fetch_timeout,
                task_timeout=fetch_timeout,
                auth_token=auth_token,
                tls_root_certs=read_pem(tls_root_certs) or cert,
                tls_client_cert=cert,
                tls_client_key=key,
            )
        )
        handler_chain = HandlerChain.of(handlers)
        self._runner = TaskRunner(
            self.url,
            self.spool,
            self._cancelled,
            TaskSessions(functools.partial(task_session, session_builder, memory_limit_bytes, extensions)),
            handler_chain,  # plan rewrites (see events)
            self._clients,
            (self.spool.root,) + ((shared_spool_root,) if shared_spool_root else ()),
            memory_limit_bytes,
            self._stopped,
        )
        # streamed exchanges to consumers elsewhere (see runtime.streams): only where a stream's
        # producer sees what it needs (no memory limit, no session hook, no plan rewrites) and
        # nothing must be encrypted (the data plane speaks plain TCP)
        self.data_plane_port = 0  # none
        if memory_limit_bytes is None and session_builder is None and not cert:
            if not handler_chain.rewrites_plans():
                self.data_plane_port = streams.serve(host, auth_token or "", data_plane_port)
        self._drain = Drain(self.spool.held_queries)
        self._sweeper = threading.Thread(target=self._sweep_loop, name="spool-sweeper", daemon=True)
        self._sweeper.start()

    # -- Flight entry points -------------------------------------------------------------
    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        """The actions `do_action` answers, each with a one-line description."""
        return [
            ("run_task", "Run one task and keep its outputs in the spool"),
            ("release", "Delete a query's spool data"),
            ("cancel", "Stop a query's running tasks, refuse its new ones, delete its spool data"),
            ("cancel_attempt", "Stop one task attempt (another won), refuse it, delete its outputs"),
            ("close_stage", "A stage's streams have no reader any more: its producers here stop sending"),
            ("health", "Version and spool state"),
            ("heartbeat", "A coordinator's liveness probe; renews the spool leases of the queries it names"),
            ("read_output", "The bytes of one task output file, in chunks"),
            ("drain", "Take no new task; finish the running ones and serve held outputs until released"),
        ]

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterable[flight.Result]:
        """Answer one action of `list_actions`; a bad message or a failure becomes a
        FlightServerError carrying its reason, never a bare Python traceback."""
        body = action.body.to_pybytes() if action.body is not None else b""
        try:
            if action.type == "run_task":
                result = self._run_task(decode_run_task(body))
                return [flight.Result(encode(result))]
            if action.type == "release":
                query_id = decode_query_id(body)
                streams.release(query_id)  # its streaming tasks here stop, its channels go
                self.spool.release(query_id)
                return []
            if action.type == "cancel":
                query_id = decode_query_id(body)
                self._cancelled.cancel(query_id)
                streams.release(query_id)
                self.spool.release(query_id)
                return []
            if action.type == "cancel_attempt":
                key = decode_task_key(body)
                self._cancelled.cancel(key)
                self.spool.discard_attempt(key)
                return []
            if action.type == "close_stage":  # the key names a stage: its task and attempt are unused
                key = decode_task_key(body)
                streams.close_stage(key.query_id, key.stage)
                return []
            if action.type == "health":
                return [flight.Result(json.dumps(self.health()).encode())]
            if action.type == "heartbeat":
                self.spool.renew(decode_heartbeat(body).query_ids)
                # a draining worker says so: its coordinators send it no more tasks
                return [flight.Result(json.dumps({"draining": True}).encode())] if self.draining else []
            if action.type == "drain":
                self.drain()
                return [flight.Result(json.dumps(self.health()).encode())]
            if action.type == "read_output":
                return self._file_chunks(self._output_path(body), self.served)
        except ProtocolError as exc:
            raise flight.FlightServerError(f"refused message: {exc}") from exc
        except flight.FlightError:
            raise
        except BaseException as exc:  # never a bare Python traceback to the caller, even for a panic
            if not is_failure(exc):
                raise
            raise flight.FlightServerError(f"{action.type} failed: {type(exc).__name__}: {exc}") from exc
        raise flight.FlightServerError(f"unknown action {action.type!r}")

    def _output_path(self, ticket: bytes) -> str:
        """The real path of the spool file a ticket names. A ticket can only name a task output
        of this spool, and it is served only from a regular file whose real path (links
        resolved) lies inside the spool's real root: a link planted in the spool is refused."""
        try:
            t = decode_ticket(ticket)
        except ProtocolError as exc:
            raise flight.FlightServerError(f"refused ticket: {exc}") from exc
        output = f"query {t.query_id} stage {t.stage} task {t.task} partition {t.partition}"
        path = os.path.realpath(self.spool.output_path(t.query_id, t.stage, t.task, t.partition))
        if not os.path.exists(path):
            raise flight.FlightServerError(f"no output for {output}")
        if not lies_in(path, (self.spool.root,)) or not os.path.isfile(path):
            raise flight.FlightServerError(
                f"refused output {output}: it is not a file inside this worker's spool (links resolved)"
            )
        return path

    @staticmethod
    def _file_chunks(path: str, served: ServedBytes) -> Iterator[bytes]:
        """The bytes of an exchange file as they are: compressed batches are not decoded."""
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK_BYTES):
                served.file_chunk(len(chunk))
                yield flight.Result(chunk)

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        """Store one partition of a memory table a coordinator ships (a ShipPartition message
        as the descriptor's command) as an output of task 0 of its producer: served, charged to
        the spool quota, renewed and released like any task output. Answers the partition's
        PartitionResult."""
        try:
            message = decode_ship_partition(descriptor.command or b"")
        except ProtocolError as exc:
            raise flight.FlightServerError(f"refused message: {exc}") from exc
        query_id = message.query_id
        name = f"query {query_id} memory table {message.stage} partition {message.partition}"
        try:
            self._cancelled.check(query_id)
            path = self.spool.attempt_output_path(TaskKey(query_id, message.stage, 0, 0), message.partition)
            makedirs(os.path.dirname(path))
            output, _ = write_partition_file(
                self._shipped_batches(reader, query_id),
                message.partition,
                path,
                pa.ipc.IpcWriteOptions(compression=message.compression, emit_dictionary_deltas=True),
                on_write=functools.partial(self.spool.charge, query_id),
            )
            result = PartitionResult(output.partition, output.rows, output.bytes, output.path)
            writer.write(pa.py_buffer(encode(result)))
        except flight.FlightError:
            raise
        except BaseException as exc:  # never a bare Python traceback to the caller
            if not is_failure(exc):
                raise
            log.warning("storing %s failed: %s", name, exc)
            raise flight.FlightServerError(f"storing {name} failed: {self._runner.describe(exc)}") from exc
        finally:
            if self._cancelled.is_cancelled(query_id):  # stored after the query's data was deleted
                self.spool.release(query_id)

    def _shipped_batches(self, reader: flight.MetadataRecordBatchReader, query_id: str):
        """The batches of a `do_put`, stopping when their query is cancelled."""
        while True:
            self._cancelled.check(query_id)
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return
            if chunk.data is not None:
                yield chunk.data

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.RecordBatchStream:
        """Stream the batches of the task output file `ticket` names, from this worker's spool."""
        path = self._output_path(ticket.ticket)
        try:
            reader = pa.ipc.open_file(pa.memory_map(path))
        except (OSError, pa.ArrowException) as exc:  # a clear error, never a worker traceback
            raise flight.FlightServerError(f"could not read output file: {exc}") from exc
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        # a reader's stream sends dictionaries (and their deltas) ahead of the batches that use
        # them; a generator's sends none, which a reader of a dictionary column refuses
        served = pa.RecordBatchReader.from_batches(reader.schema, self.served.streamed(batches))
        return flight.RecordBatchStream(served)

    # -- work ----------------------------------------------------------------------------
    def health(self) -> dict[str, str | int]:
        """The worker's version, protocol version, URL, number of spool files, and the bytes of
        task outputs it has served since it started (the `health` action): `served_file_bytes`
        copied out as stored (`read_output`), `served_stream_bytes` of Arrow data (`do_get`);
        its drain `state` ("serving", "draining" or "drained"); and its load now:
        `running_tasks`, `held_queries` (queries whose outputs it holds), `spool_bytes` (outputs
        and fetched inputs of its queries), `memory_bytes` (its process's resident memory) and `pid`;
        `extensions`, the names of its user extensions, comma-separated."""
        return {
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "url": self.url,
            "spool_files": len(self.spool.files()),
            "served_file_bytes": self.served.file_bytes,
            "served_stream_bytes": self.served.stream_bytes,
            **self._drain.report(),
            "spool_bytes": self.spool.used_bytes(),
            "memory_bytes": resident_bytes(),
            "pid": os.getpid(),  # the dashboard tells workers in its own process by it
            "data_plane_port": self.data_plane_port,  # where its streamed exchanges are served, 0: none
            "extensions": ",".join(self.extensions),
        }

    # -- drain ---------------------------------------------------------------------------
    def drain(self) -> bool:
        """Take no new task from now on (each is refused at once, so its coordinator runs it
        elsewhere); running tasks go on, and held outputs are served until their queries release
        them. Whether this call began the drain. See `wait_drained`."""
        return self._drain.start()  # no logging: a signal handler calls this

    @property
    def draining(self) -> bool:
        """Whether the worker was asked to drain (by `drain`, or the `drain` action)."""
        return self._drain.draining

    @property
    def drain_requested(self) -> threading.Event:
        """Set when the worker begins to drain: its owner may wait on it to stop the worker."""
        return self._drain.requested

    def wait_drained(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the drain to end: no task running, no query's outputs
        held. Whether it did; what is left then costs its queries a recompute if the worker stops."""
        return self._drain.wait(timeout)

    def _run_task(self, message: RunTask) -> TaskResult:
        started = time.perf_counter()
        name = f"query {message.query_id} stage {message.stage} task {message.task}"
        log.debug("running %s (attempt %d)", name, message.attempt)
        try:
            self._drain.task_begins(name)
        except TaskRefused as exc:  # refused before it did anything: its coordinator routes it elsewhere
            raise flight.FlightServerError(str(exc), extra_info=draining_info(message.worker)) from exc
        try:
            return self._runner.run(message, started, name)
        finally:
            self._drain.task_ends()

    def _sweep_loop(self) -> None:
        interval = max(1.0, min(60.0, self.spool.ttl_seconds / 4))
        while not self._stopped.wait(interval):
            for query_id in self.spool.sweep():
                log.info("swept abandoned query %s from the spool", query_id)

    def cancel_all_tasks(self) -> None:
        """Stop every running task at its next batch and refuse new ones (the worker or its
        process is ending)."""
        self._cancelled.cancel_all()

    def stop(self) -> None:
        """Stop serving and close connections to other workers. Running tasks are stopped, not
        waited for: their calls fail naming this worker as lost, so their coordinators run them
        elsewhere."""
        self._stopped.set()
        self.cancel_all_tasks()
        self.shutdown()
        self._clients.close()
