"""Worker subprocesses on this machine (`LocalCluster`), started by the library itself.

It is a resolver (it lists its URLs), makes a random token for its workers (or takes the one
given) and exposes it as `auth_token`; a DistributedContext using it picks the token up. Its
spools are shared or not as the embedded cluster's are (see `clusters.embedded`)."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Sequence

from ..common import exits
from ..common.cpus import format_cpu_list
from ..protocol.auth import TOKEN_ENV, check_token, new_token
from ..worker.spool import query_files


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

    By default the workers' spools are folders of one root, `shared_spool_root`, which they and
    the coordinator read in place. `share_spools=False` makes them share nothing, as workers on
    separate machines would: each spool is a folder of its own (`spools`), only its worker is
    told of it, and every exchange crosses Arrow Flight (lz4-compressed with the default
    `compression="auto"`). `hosts` gives each worker its own address to listen on, one per
    worker (any of 127.0.0.0/8 is this machine's loopback on Linux), e.g.
    `[f"127.0.0.{i + 2}" for i in range(n)]`; by default all listen on 127.0.0.1.

    `worker_cpus` confines each worker to some CPUs from its start (`worker --cpus`, Linux), worker
    `i` to `worker_cpus[i % len(worker_cpus)]`: `[[0], [1]]` runs two workers as two one-core
    machines would run them, DataFusion's thread pool in each sized to its core.
    """

    def __init__(
        self,
        n: int = 2,
        start_timeout: float = 30.0,
        spool_root: str | None = None,
        *,
        auth_token: str | None = None,
        worker_args: list[str] | tuple[str, ...] = (),
        share_spools: bool = True,
        hosts: list[str] | tuple[str, ...] | None = None,
        worker_cpus: Sequence[Collection[int]] | None = None,
    ):
        if n < 1:
            raise ValueError("a local cluster needs at least one worker")
        if hosts is not None and (isinstance(hosts, str) or len(hosts) != n):
            raise ValueError(f"hosts must list one address per worker ({n}), got {hosts!r}")
        self.auth_token = check_token(auth_token) if auth_token is not None else new_token()
        self.worker_args = [str(a) for a in worker_args]
        self.worker_cpus = [format_cpu_list(cpus) for cpus in worker_cpus or ()]
        if worker_cpus is not None and (not self.worker_cpus or not all(self.worker_cpus)):
            raise ValueError(f"worker_cpus must give each worker at least one CPU, got {worker_cpus!r}")
        self.hosts = list(hosts) if hosts is not None else ["127.0.0.1"] * n
        self._own_root = spool_root is None and share_spools
        if share_spools:
            self.spool_root = spool_root or tempfile.mkdtemp(prefix="datafusion-distributed-local-")
        else:
            self.spool_root = spool_root
        self.shared_spool_root: str | None = self.spool_root if share_spools else None
        # sharing nothing and no root given: each worker's folder is made apart, no path relates them
        self.spools = [
            os.path.join(self.spool_root, f"worker-{i}")
            if self.spool_root
            else tempfile.mkdtemp(prefix="datafusion-distributed-worker-")
            for i in range(n)
        ]
        self._own_spools = spool_root is None
        self.processes: list[subprocess.Popen] = []
        self.urls: list[str] = []
        self._lock = threading.RLock()  # reentrant: a signal's clean-up may interrupt close()
        atexit.register(self.close)
        self._exit_key = exits.at_exit_signal(self.close, holds_handlers=True)
        try:
            for i in range(n):
                self._start(i, start_timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, index: int, timeout: float) -> None:
        command = [
            sys.executable, "-m", "datafusion_distributed", "worker",
            "--host", self.hosts[index], "--port", "0", "--spool-dir", self.spools[index],
            "--parent-pid", str(os.getpid()), *self.worker_args,
        ]  # fmt: skip
        if self.shared_spool_root:
            command += ["--shared-spool-root", self.shared_spool_root]
        if self.worker_cpus:
            command += ["--cpus", self.worker_cpus[index % len(self.worker_cpus)]]
        if self._own_spools:  # a worker outliving this process deletes its spool, the last one the root
            command.append("--remove-spool-on-exit")
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env={**os.environ, TOKEN_ENV: self.auth_token},
        )
        if index == len(self.processes):
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
        self._start(index, start_timeout)

    def spool_files(self) -> list[str]:
        """Every file of the queries in the workers' spools (to see that queries clean up after them)."""
        return [f for spool in self.spools for f in query_files(spool)]

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
            elif self._own_spools:
                for spool in self.spools:
                    shutil.rmtree(spool, ignore_errors=True)
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
        if (code := process.wait()) > 0:  # it stopped by itself: its error went to standard error
            raise RuntimeError(f"worker process exited with status {code} before listening")
        raise RuntimeError(f"worker process did not start within {timeout}s (printed {line!r})")
    return line.removeprefix("listening on ")
