"""The `serve` command: an Arrow Flight SQL endpoint over a cluster, for any Flight SQL client
(the ADBC drivers, JDBC, BI tools; see docs/flight-sql.md).

    datafusion-distributed serve --port 32010 --init tables.sql --auth-token ...
    datafusion-distributed serve --workers 4          # 4 worker processes started here
    datafusion-distributed serve --workers grpc://h1:50051,grpc://h2:50051
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from .. import LocalCluster
from ..flight_sql import FlightSqlServer, ServeOptions
from .settings import add_setting_flags, config_from_args
from .statements import split_statements

SERVE_TOKEN_ENV = "DATAFUSION_DISTRIBUTED_SERVE_TOKEN"


def _init_statements(path: str | None) -> list[str]:
    """The statements of the --init file."""
    if path is None:
        return []
    if not Path(path).is_file():
        raise SystemExit(f"error: --init {path!r}: no such file")
    return [s.sql for s in split_statements(Path(path).read_text(encoding="utf-8")).all_statements()]


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _tls(args: argparse.Namespace) -> tuple[bytes, bytes] | None:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("error: --tls-cert and --tls-key go together")
    if not args.tls_cert:
        return None
    return Path(args.tls_cert).read_bytes(), Path(args.tls_key).read_bytes()


def run_serve(args: argparse.Namespace) -> int:
    """`serve`: start the endpoint (and the worker processes of `--workers N`), print where it
    listens, and serve until Ctrl-C or SIGTERM."""
    token = args.auth_token or os.environ.get(SERVE_TOKEN_ENV) or None
    if token is None and not _is_loopback(args.host) and not args.insecure_no_auth:
        raise SystemExit(
            f"error: serving on {args.host} needs a token (--auth-token or ${SERVE_TOKEN_ENV}); "
            "--insecure-no-auth lets anyone who can connect run SQL"
        )
    options = ServeOptions(
        host=args.host,
        port=args.port,
        auth_token=token,
        tls=_tls(args),
        init=_init_statements(args.init),
        max_running=args.max_running,
        max_queued=args.max_queued,
        session_idle_seconds=args.session_idle_timeout,
    )
    config = config_from_args(args)
    with contextlib.ExitStack() as stack:
        workers: Any = None
        if args.workers and args.workers.isdigit():
            workers = stack.enter_context(LocalCluster(int(args.workers)))
        elif args.workers:
            workers = [url for url in args.workers.split(",") if url]
        server = FlightSqlServer(workers, config, options)
        stack.callback(server.shutdown)
        stopped = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        stack.callback(signal.signal, signal.SIGTERM, previous)
        print(f"serving Flight SQL at {server.location}", file=sys.stderr, flush=True)
        serving = threading.Thread(target=server.serve, name="flight-sql", daemon=True)
        serving.start()
        while not stopped.wait(0.5) and serving.is_alive():
            pass
    return 0


def add_serve_command(sub: argparse._SubParsersAction) -> None:
    """The `serve` subcommand and its flags."""
    serve = sub.add_parser(
        "serve",
        help="serve Arrow Flight SQL: clients run SQL distributed over the cluster",
        description="Serve Arrow Flight SQL (see docs/flight-sql.md): each client connection gets a "
        "session of its own (its DDL and SET apply to it alone), queries stream their results.",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=32010, help="0 picks a free port")
    serve.add_argument(
        "--workers",
        help="comma-separated worker URLs, or a number of worker processes to start here; without it, "
        "an embedded cluster in this process (see --embedded-workers)",
    )
    serve.add_argument(
        "--init",
        metavar="FILE",
        help="statements every new session runs first (CREATE EXTERNAL TABLE, SET, ...)",
    )
    serve.add_argument(
        "--auth-token",
        help=f"token clients must send as 'authorization: Bearer <token>' (default: ${SERVE_TOKEN_ENV}; "
        "prefer the variable: a command line is visible to other users); needed off loopback",
    )
    serve.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve off loopback without a token: anyone may connect",
    )
    serve.add_argument("--tls-cert", help="PEM certificate file: serve TLS (grpc+tls://)")
    serve.add_argument("--tls-key", help="PEM private key file of --tls-cert")
    serve.add_argument("--max-running", type=int, default=4, help="queries running at once (default: 4)")
    serve.add_argument(
        "--max-queued",
        type=int,
        default=32,
        help="queries waiting for a turn; more are refused (default: 32)",
    )
    serve.add_argument(
        "--session-idle-timeout",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="a connection's session is closed after so long without a call (default: 3600)",
    )
    add_setting_flags(serve)
    serve.set_defaults(run=run_serve)
