"""Clusters the library starts itself: in-process Flight workers (the default) and worker
subprocesses on this machine (`LocalCluster`). Both are resolvers: they list their URLs.

Each makes a random token for its workers (or takes the one given) and exposes it as
`auth_token`; a DistributedContext using the cluster as its resolver picks it up. Their
workers' spools share one folder, `shared_spool_root`: workers (and the coordinator) read each
other's task outputs from disk in place instead of fetching them over the network."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref

from .common import exits
from .execution_plans.session import SessionBuilder
from .protocol.auth import TOKEN_ENV, check_token, new_token
from .worker.flight_worker import FlightWorker
from .worker.spool import query_files


class EmbeddedCluster:
    """`n` Flight workers inside this process on loopback, each with its own spool.

    `worker_options` are passed to every `FlightWorker` (for example `spool_quota_bytes`,
    `memory_limit_bytes`, `tls_cert`/`tls_key`)."""

    def __init__(
        self,
        n: int = 2,
        session_builder: SessionBuilder | None = None,
        *,
        auth_token: str | None = None,
        **worker_options,
    ):
        if n < 1:
            raise ValueError("an embedded cluster needs at least one worker")
        self.auth_token = check_token(auth_token) if auth_token is not None else new_token()
        self._root = self.shared_spool_root = tempfile.mkdtemp(prefix="datafusion-distributed-embedded-")
        worker_options.setdefault("shared_spool_root", self._root)
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
            functools.partial(shutil.rmtree, self._root, ignore_errors=True), holds_handlers=True
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


def _stop_embedded(workers: list[FlightWorker], root: str, exit_key: int | None = None) -> None:
    for worker in workers:
        worker.stop()
    shutil.rmtree(root, ignore_errors=True)
    if exit_key is not None:
        exits.forget(exit_key)


class LocalCluster:
    """`n` worker processes on this machine (`python -m datafusion_distributed worker`).

    A context manager and a resolver::

        with LocalCluster(3) as cluster:
            dctx = DistributedContext(ctx, workers=cluster)

    Workers are stopped on `close()`, on exit of the `with` block, at interpreter exit, on
    Ctrl-C, SIGTERM and SIGHUP; each worker also exits by itself, deleting its spool, if this
    process dies (even by SIGKILL). They get the cluster's token
    (`auth_token`, random unless given) through their environment, never on a command line;
    `worker_args` are added to each worker's command line (e.g. `["--spool-quota-bytes", "1000"]`).
    """

    def __init__(
        self,
        n: int = 2,
        start_timeout: float = 30.0,
        spool_root: str | None = None,
        *,
        auth_token: str | None = None,
        worker_args: list[str] | tuple[str, ...] = (),
    ):
        if n < 1:
            raise ValueError("a local cluster needs at least one worker")
        self.auth_token = check_token(auth_token) if auth_token is not None else new_token()
        self.worker_args = [str(a) for a in worker_args]
        self._own_root = spool_root is None
        self.spool_root = self.shared_spool_root = spool_root or tempfile.mkdtemp(
            prefix="datafusion-distributed-local-"
        )
        self.processes: list[subprocess.Popen] = []
        self.urls: list[str] = []
        self._lock = threading.RLock()  # reentrant: a signal's clean-up may interrupt close()
        atexit.register(self.close)
        self._exit_key = exits.at_exit_signal(self.close, holds_handlers=True)
        try:
            for i in range(n):
                self._start(os.path.join(self.spool_root, f"worker-{i}"), start_timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, spool: str, timeout: float, index: int | None = None) -> None:
        command = [
            sys.executable, "-m", "datafusion_distributed", "worker",
            "--host", "127.0.0.1", "--port", "0", "--spool-dir", spool,
            "--parent-pid", str(os.getpid()), "--shared-spool-root", self.spool_root, *self.worker_args,
        ]  # fmt: skip
        if self._own_root:  # a worker outliving this process deletes its spool, the last one the root
            command.append("--remove-spool-on-exit")
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env={**os.environ, TOKEN_ENV: self.auth_token},
        )
        if index is None:
            self.processes.append(process)
            self.urls.append(_read_url(process, timeout))
        else:
            self.processes[index] = process
            self.urls[index] = _read_url(process, timeout)

    def get_urls(self) -> list[str]:
        """The workers' URLs: the cluster is a resolver (a restarted worker has a new one)."""
        return list(self.urls)

    def kill(self, index: int) -> None:
        """Kill worker `index` abruptly (SIGKILL), as a crash would."""
        self.processes[index].kill()
        self.processes[index].wait()

    def restart(self, index: int, start_timeout: float = 30.0) -> None:
        """Start worker `index` again (after `kill`); it gets a new port, so a new URL."""
        if self.processes[index].poll() is None:
            self.kill(index)
        if self.processes[index].stdout:
            self.processes[index].stdout.close()
        self._start(os.path.join(self.spool_root, f"worker-{index}"), start_timeout, index)

    def spool_files(self) -> list[str]:
        """Every file of the queries in the workers' spools (to see that queries clean up after them)."""
        return query_files(self.spool_root)

    def close(self) -> None:
        """Stop the workers (SIGTERM, then SIGKILL after 10 seconds) and delete the spools the
        cluster made; closing twice does nothing."""
        with self._lock:
            for process in self.processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for process in self.processes:
                try:
                    process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                if process.stdout:
                    process.stdout.close()
            self.processes = []
            if self._own_root:
                shutil.rmtree(self.spool_root, ignore_errors=True)
        atexit.unregister(self.close)
        exits.forget(self._exit_key)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_url(process: subprocess.Popen, timeout: float) -> str:
    """The URL a worker prints on its first line ("listening on grpc://...")."""
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    line = result[0].strip() if result else ""
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"worker process did not start within {timeout}s (printed {line!r})")
    return line.removeprefix("listening on ")
