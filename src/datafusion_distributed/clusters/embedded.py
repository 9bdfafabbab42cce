"""The embedded cluster: Flight workers in this process, the default of a DistributedContext.

It is a resolver (it lists its URLs), makes a random token for its workers (or takes the one
given) and exposes it as `auth_token`; a DistributedContext using it picks the token up. By
default its workers' spools share one folder, `shared_spool_root`: workers (and the coordinator)
read each other's task outputs from disk in place instead of fetching them over the network.
With `share_spools=False` they share nothing, as workers on separate machines: each spool is a
folder only its worker is told of, `shared_spool_root` is None, and every exchange between two
workers (or to the coordinator) crosses Arrow Flight, compressed."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
import weakref

from ..common import exits
from ..protocol.auth import check_token, new_token
from ..runtime.session import SessionBuilder
from ..worker.flight_worker import FlightWorker


class EmbeddedCluster:
    """`n` Flight workers inside this process on loopback, each with its own spool.

    `worker_options` are passed to every `FlightWorker` (for example `spool_quota_bytes`,
    `memory_limit_bytes`, `tls_cert`/`tls_key`). With `share_spools=False` no worker (nor the
    coordinator) reads another's spool in place: every exchange is fetched over Flight."""

    def __init__(
        self,
        n: int = 2,
        session_builder: SessionBuilder | None = None,
        *,
        auth_token: str | None = None,
        share_spools: bool = True,
        **worker_options,
    ) -> None:
        if n < 1:
            raise ValueError("an embedded cluster needs at least one worker")
        if not share_spools and worker_options.get("shared_spool_root"):
            raise ValueError("share_spools=False and a shared_spool_root contradict each other: give one")
        self.auth_token = check_token(auth_token) if auth_token is not None else new_token()
        self._root = tempfile.mkdtemp(prefix="datafusion-distributed-embedded-")
        worker_options.setdefault("shared_spool_root", self._root if share_spools else None)
        # what a context using this cluster reads in place: exactly what the workers were told
        self.shared_spool_root: str | None = worker_options["shared_spool_root"]
        self.workers: list[FlightWorker] = []
        try:
            for i in range(n):
                self.workers.append(
                    FlightWorker(
                        os.path.join(self._root, f"worker-{i}"),
                        session_builder=session_builder,
                        auth_token=self.auth_token,
                        **worker_options,
                    )
                )
        except BaseException:
            _stop_embedded(self.workers, self._root)
            raise
        # on SIGTERM or SIGHUP the process ends, and its workers with it: only the folder is left
        exit_key = exits.at_exit_signal(
            functools.partial(_remove_spools_at_exit, self.workers, self._root), holds_handlers=True
        )
        self._finalizer = weakref.finalize(self, _stop_embedded, self.workers, self._root, exit_key)

    def get_urls(self) -> list[str]:
        """The workers' URLs: the cluster is a resolver."""
        return [w.url for w in self.workers]

    def spool_files(self) -> list[str]:
        """Every file of the queries in the workers' spools (to see that queries clean up after them)."""
        return [f for w in self.workers for f in w.spool.files()]

    def close(self) -> None:
        """Stop the workers and delete their spools; closing twice does nothing."""
        self._finalizer()

    def __enter__(self) -> EmbeddedCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _remove_spools_at_exit(workers: list[FlightWorker], root: str) -> None:
    """Delete the spools as a signal ends the process: the tasks are stopped first, and the
    folder deleted again (a few times, briefly) while a task that was mid-write recreates it."""
    for worker in workers:
        worker.cancel_all_tasks()
    for _ in range(10):
        shutil.rmtree(root, ignore_errors=True)
        if not os.path.exists(root):
            return
        time.sleep(0.05)


def _stop_embedded(workers: list[FlightWorker], root: str, exit_key: int | None = None) -> None:
    for worker in workers:
        worker.stop()
    shutil.rmtree(root, ignore_errors=True)
    if exit_key is not None:
        exits.forget(exit_key)
