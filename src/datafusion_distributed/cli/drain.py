"""The `drain` command: ask workers to leave without costing their queries any work.

    datafusion-distributed drain grpc://10.0.0.5:50051 --wait --timeout 25

Each worker named takes no new task from then on, finishes its running ones and serves the
outputs it holds until their queries release them; a worker run by the `worker` command then
exits by itself. With `--wait` the command returns once every worker has drained (or exited),
as a Kubernetes preStop hook must.
"""

from __future__ import annotations

import argparse
import sys
import time

POLL_SECONDS = 0.25


def run_drain(args: argparse.Namespace) -> int:
    """`drain`: 0 once every worker was asked (with `--wait`: has drained or exited), 1 when one
    could not be asked or, with `--wait`, had not drained within `--timeout` seconds."""
    from ..common.tokens import token_from_env
    from ..errors import WorkerError, WorkerTimeout, WorkerUnreachable
    from ..protocol.auth import read_pem
    from ..protocol.flight import ClientConfig, ClientPool

    pool = ClientPool(
        ClientConfig(
            timeout=args.connect_timeout,
            auth_token=args.auth_token or token_from_env(),
            tls_root_certs=read_pem(args.tls_root_certs),
            tls_client_cert=read_pem(args.tls_client_cert),
            tls_client_key=read_pem(args.tls_client_key),
        )
    )
    failed = False
    draining = []  # the workers not drained yet by the time they answered
    try:
        for url in args.urls:
            try:
                health = pool.get(url).drain()
            except (WorkerError, WorkerTimeout, WorkerUnreachable) as exc:
                print(f"error: could not drain {url}: {exc}", file=sys.stderr)
                failed = True
                continue
            state = health.get("state", "draining")
            print(f"{url}: {state}", flush=True)
            if state != "drained":
                draining.append(url)
        if args.wait and not failed:
            failed = not _wait_drained(pool, draining, args.timeout)
    finally:
        pool.close()
    return 1 if failed else 0


def _wait_drained(pool, urls: list[str], timeout: float) -> bool:
    """Whether every worker of `urls` drained (or exited) within `timeout` seconds."""
    from ..errors import WorkerError, WorkerTimeout, WorkerUnreachable

    deadline = time.monotonic() + timeout
    left = set(urls)
    while left:
        for url in sorted(left):
            try:
                drained = pool.get(url).health().get("state") == "drained"
            except (WorkerUnreachable, WorkerTimeout):  # it exited: drained
                drained = True
            except WorkerError:
                drained = False
            if drained:
                print(f"{url}: drained", flush=True)
                left.discard(url)
        if left and time.monotonic() >= deadline:
            print(f"error: not drained within {timeout:g}s: {', '.join(sorted(left))}", file=sys.stderr)
            return False
        if left:
            time.sleep(POLL_SECONDS)
    return True


def add_drain_command(sub: argparse._SubParsersAction) -> None:
    """The `drain` subcommand and its flags."""
    drain = sub.add_parser(
        "drain", help="ask workers to drain: no new task, then exit once their work is read"
    )
    drain.add_argument("urls", nargs="+", metavar="URL", help="worker URLs (grpc://host:port)")
    drain.add_argument("--wait", action="store_true", help="return once every worker has drained or exited")
    drain.add_argument(
        "--timeout", type=float, default=25.0, help="seconds --wait waits at most (default 25)"
    )
    drain.add_argument(
        "--connect-timeout", type=float, default=10.0, help="seconds each call to a worker may take"
    )
    drain.add_argument("--auth-token", help="the workers' token (default: $DATAFUSION_DISTRIBUTED_TOKEN)")
    drain.add_argument("--tls-root-certs", help="PEM file of the CAs that signed the workers' certificates")
    drain.add_argument("--tls-client-cert", help="PEM client certificate, for workers requiring one")
    drain.add_argument("--tls-client-key", help="PEM private key of --tls-client-cert")
    drain.set_defaults(run=run_drain)
