"""The `worker` command: serve a FlightWorker until asked to stop.

DATAFUSION_DISTRIBUTED_TOKEN=... datafusion-distributed worker --host 127.0.0.1 --port 50051
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from ..common.cpus import confine_to, parse_cpu_list


def _load_hook(spec: str | None):
    """`module:function` -> the function (a task session builder)."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--session-hook must look like module:function, got {spec!r}")
    return getattr(importlib.import_module(module), name)


def _parent_gone(parent_pid: int) -> bool:
    if os.getppid() != parent_pid:
        return True
    try:
        os.kill(parent_pid, 0)
    except OSError:
        return True
    return False


# How long a stopping worker waits for the calls in progress. Not for a running task to end: once
# the worker is gone its outputs cannot be read, so its coordinator reruns the task elsewhere.
STOP_SECONDS = 1.0


# Seconds a worker asked to leave (SIGTERM, the `drain` action) has to drain: finish its running
# tasks and let its queries read the outputs it holds. Under Kubernetes' default grace period
# (30 s) with room to stop.
DRAIN_SECONDS = 25.0


def _stop_signals() -> list[signal.Signals]:
    """The signals that stop a worker at once: SIGINT, and SIGHUP unless it is ignored (nohup).
    SIGTERM drains it first (a second SIGTERM stops it at once)."""
    hangup: signal.Signals | None = getattr(signal, "SIGHUP", None)
    if hangup is None or signal.getsignal(hangup) is signal.SIG_IGN:
        return [signal.SIGINT]
    return [signal.SIGINT, hangup]


def _stop(worker, seconds: float) -> bool:
    """Stop serving, waiting up to `seconds` for the calls in progress; whether they all ended."""
    stopper = threading.Thread(target=worker.stop, name="worker-stop", daemon=True)
    stopper.start()
    stopper.join(seconds)
    return not stopper.is_alive()


def _remove_spool(spool: str, shared_root: str | None) -> None:
    """Delete a worker's spool folder, and the shared spool root if that left it empty."""
    shutil.rmtree(spool, ignore_errors=True)
    if shared_root:
        try:
            os.rmdir(shared_root)  # only ever removes an empty folder: the last worker's
        except OSError:
            pass


def _drain(worker, seconds: float, stop: threading.Event, parent_pid: int) -> bool:
    """Drain `worker` (see `FlightWorker.drain`) for up to `seconds`, or until `stop` is set
    (a second SIGTERM, SIGINT, SIGHUP) or `parent_pid` ends; whether it drained."""
    log = logging.getLogger(__name__)
    worker.drain()
    log.info(
        "worker %s draining: up to %gs for %d task(s) running",
        worker.url,
        seconds,
        worker.health()["running_tasks"],
    )
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and not stop.is_set():
        if worker.wait_drained(min(0.2, left)):
            log.info("worker %s drained", worker.url)
            return True
        if parent_pid and _parent_gone(parent_pid):
            return False
    health = worker.health()
    log.warning(
        "worker %s stops before it drained (%d task(s) running, outputs of %d queries held): "
        "their coordinators recompute them",
        worker.url,
        health["running_tasks"],
        health["held_queries"],
    )
    return False


def run_worker(args: argparse.Namespace) -> int:
    """`worker`: serve a FlightWorker until SIGTERM, the `drain` action, SIGINT, SIGHUP or the
    end of `--parent-pid`.

    SIGTERM and the `drain` action drain it first: it takes no new task, finishes its running
    ones and serves the outputs it holds until their queries release them, for up to
    `--drain-timeout` seconds (a second SIGTERM ends the wait). The others stop it at once.
    Calls still in progress `STOP_SECONDS` after that (running tasks) are abandoned: their
    coordinator takes the worker for lost. A spool folder the worker made itself, or any with
    `--remove-spool-on-exit`, is deleted as it exits."""
    if args.cpus is not None:  # before the worker's first query sizes DataFusion's thread pool
        try:
            confine_to(args.cpus)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"error: --cpus: {exc}") from None
    from ..common.tokens import TOKEN_ENV, token_from_env
    from ..errors import ExtensionError
    from ..runtime.extensions import load
    from ..worker.flight_worker import FlightWorker

    token = args.auth_token or token_from_env()
    if token is None and not args.insecure_no_auth:
        raise SystemExit(
            f"error: refusing to start a worker without authentication: set {TOKEN_ENV} (or --auth-token) "
            "to the cluster's shared token, or pass --insecure-no-auth to accept plans, which can carry "
            "Python code, from anyone who can reach this worker"
        )
    if (args.tls_cert is None) != (args.tls_key is None):
        raise SystemExit("error: --tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise SystemExit("error: --tls-client-ca needs the worker to serve TLS (--tls-cert and --tls-key)")
    for extension in args.extension:
        try:
            load(extension)  # before the spool folder is made: a bad one leaves nothing behind
        except ExtensionError as exc:
            raise SystemExit(f"error: --extension: {exc}") from None
    spool = args.spool_dir or tempfile.mkdtemp(prefix="datafusion-distributed-worker-")
    worker = FlightWorker(
        spool, host=args.host, port=args.port, session_builder=_load_hook(args.session_hook),
        spool_ttl=args.spool_ttl, auth_token=token, insecure_no_auth=args.insecure_no_auth,
        tls_cert=args.tls_cert, tls_key=args.tls_key, tls_root_certs=args.tls_root_certs,
        tls_client_ca=args.tls_client_ca,
        spool_quota_bytes=args.spool_quota_bytes, memory_limit_bytes=args.memory_limit_bytes,
        shared_spool_root=args.shared_spool_root, data_plane_port=args.data_plane_port,
        extensions=args.extension,
    )  # fmt: skip
    if token is None:
        print("warning: this worker accepts calls from anyone who can reach it", file=sys.stderr, flush=True)
    stop = threading.Event()  # stop at once
    terms: list[int] = []

    def on_term(*_) -> None:
        terms.append(1)
        if len(terms) == 1:
            worker.drain()  # from this instant no task is taken
        else:
            stop.set()

    for sig in _stop_signals():
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, on_term)
    print(f"listening on {worker.url}", flush=True)
    log = logging.getLogger(__name__)
    log.info("worker %s serving, spool %s", worker.url, worker.spool.root)
    while not stop.wait(0.2) and not worker.drain_requested.is_set():
        if args.parent_pid and _parent_gone(args.parent_pid):
            log.info("process %d ended: stopping", args.parent_pid)
            break
    if worker.drain_requested.is_set() and not stop.is_set():
        _drain(worker, args.drain_timeout, stop, args.parent_pid)
    stopped = _stop(worker, STOP_SECONDS)
    if args.spool_dir is None or args.remove_spool_on_exit:
        _remove_spool(worker.spool.root, args.shared_spool_root)
    if not stopped:  # a task still runs in a call the server would wait for: end now
        log.warning("tasks still running after %ss: exiting without them", STOP_SECONDS)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def add_worker_command(sub: argparse._SubParsersAction) -> None:
    """The `worker` subcommand and its flags."""
    worker = sub.add_parser("worker", help="run a worker serving Arrow Flight")
    worker.add_argument("--host", default="127.0.0.1")
    worker.add_argument("--port", type=int, default=50051, help="0 picks a free port")
    worker.add_argument(
        "--data-plane-port", type=int, default=0, help="port of its streamed exchanges; 0 picks a free port"
    )
    worker.add_argument(
        "--spool-dir", help="folder for task outputs (default: a new temporary folder, deleted on exit)"
    )
    worker.add_argument(
        "--spool-ttl", type=float, default=3600.0, help="seconds before abandoned data is swept"
    )
    worker.add_argument(
        "--shared-spool-root",
        help="folder holding the spools of this host's workers: read their outputs in place, not fetched",
    )
    worker.add_argument(
        "--session-hook", help="module:function building the SessionContext the worker's tasks run in"
    )
    worker.add_argument(
        "--extension",
        action="append",
        default=[],
        metavar="MODULE:ATTRIBUTE",
        help="a user extension installed on the session tasks run in: an FFI codec, an extension bundle or "
        "an installer function (repeatable; see docs/extensions.md)",
    )
    worker.add_argument("--parent-pid", type=int, default=0, help="exit when this process ends")
    worker.add_argument(
        "--remove-spool-on-exit",
        action="store_true",
        help="delete --spool-dir when the worker exits, and --shared-spool-root if that leaves it empty",
    )
    worker.add_argument(
        "--auth-token",
        help="shared token coordinators must present (default: $DATAFUSION_DISTRIBUTED_TOKEN; "
        "prefer the variable: a command line is visible to other users)",
    )
    worker.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="run without a token: anyone who can connect runs code",
    )
    worker.add_argument("--tls-cert", help="PEM certificate file: serve TLS (grpc+tls://)")
    worker.add_argument("--tls-key", help="PEM private key file of --tls-cert")
    worker.add_argument(
        "--tls-root-certs",
        help="PEM file of CAs to trust when fetching from other workers (default: --tls-cert)",
    )
    worker.add_argument(
        "--tls-client-ca",
        help="PEM file of CAs: require client certificates they signed (mutual TLS); "
        "this worker presents --tls-cert to other workers",
    )
    worker.add_argument(
        "--spool-quota-bytes", type=int, help="most bytes the spool may hold; tasks passing it fail"
    )
    worker.add_argument(
        "--memory-limit-bytes",
        type=int,
        help="memory pool shared by the worker's tasks (DataFusion fair spill pool)",
    )
    worker.add_argument(
        "--drain-timeout",
        type=float,
        default=DRAIN_SECONDS,
        help="seconds a worker given SIGTERM (or the drain action) has to finish its running tasks "
        "and let its queries read the outputs it holds before it exits (0: exit at once); "
        "a second SIGTERM exits at once",
    )
    worker.add_argument(
        "--cpus",
        type=_cpu_list,
        help="run on these CPUs only (Linux; e.g. 0 or 0-3,6), as on a machine of that many cores: "
        "DataFusion sizes its thread pool from them",
    )
    worker.set_defaults(run=run_worker)


def _cpu_list(text: str) -> frozenset[int]:
    try:
        return parse_cpu_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
