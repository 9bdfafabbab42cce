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
from ..runtime.extensions import check_names
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

    The cluster changes size while queries run: `scale(n)` starts workers (queries take them
    on as their next stage starts) or drains the last ones, `replace(i)` starts a new worker in
    worker `i`'s place and drains the old one (a rolling restart, one worker at a time), and
    `drain(i)` drains one. A drained worker is unlisted at once, takes no new task, finishes
    its running ones and serves its outputs until their queries release them, for up to
    `drain_timeout` seconds; then it exits.

    `worker_cpus` confines each worker to some CPUs from its start (`worker --cpus`, Linux), worker
    `i` to `worker_cpus[i % len(worker_cpus)]`: `[[0], [1]]` runs two workers as two one-core
    machines would run them, DataFusion's thread pool in each sized to its core.

    `extensions` are user extensions by importable name ("module:attribute", see
    docs/extensions.md), installed on every worker's session (`worker --extension`).
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
        drain_timeout: float = 25.0,
        worker_cpus: Sequence[Collection[int]] | None = None,
        extensions: Sequence[str] = (),
    ) -> None:
        if n < 1:
            raise ValueError("a local cluster needs at least one worker")
        if hosts is not None and (isinstance(hosts, str) or len(hosts) != n):
            raise ValueError(f"hosts must list one address per worker ({n}), got {hosts!r}")
        self.auth_token = check_token(auth_token) if auth_token is not None else new_token()
        self.extensions = check_names(extensions, "LocalCluster's workers")
        self.worker_args = [str(a) for a in worker_args]
        self.worker_args += [arg for name in self.extensions for arg in ("--extension", name)]
        self.worker_cpus = [format_cpu_list(cpus) for cpus in worker_cpus or ()]
        if worker_cpus is not None and (not self.worker_cpus or not all(self.worker_cpus)):
            raise ValueError(f"worker_cpus must give each worker at least one CPU, got {worker_cpus!r}")
        self.hosts = list(hosts) if hosts is not None else ["127.0.0.1"] * n
        if drain_timeout < 0:
            raise ValueError("drain_timeout must be at least 0 seconds")
        self.drain_timeout = drain_timeout
        self._own_root = spool_root is None and share_spools
        self.spool_root: str | None = spool_root
        if share_spools:
            self.spool_root = spool_root or tempfile.mkdtemp(prefix="datafusion-distributed-local-")
        self.shared_spool_root: str | None = self.spool_root if share_spools else None
        # sharing nothing and no root given: each worker's folder is made apart, no path relates them
        self._made = 0  # workers started so far: each new one's spool folder is a new one
        self.spools = [self._new_spool() for _ in range(n)]
        self._own_spools = spool_root is None
        self.processes: list[subprocess.Popen] = []
        self.urls: list[str] = []
        self._leaving: list[subprocess.Popen] = []  # drained workers not yet exited
        self._lock = threading.RLock()  # reentrant: a signal's clean-up may interrupt close()
        atexit.register(self.close)
        self._exit_key = exits.at_exit_signal(self.close, holds_handlers=True)
        try:
            for i in range(n):
                self._start(i, start_timeout)
        except BaseException:
            self.close()
            raise

    def _new_spool(self) -> str:
        """A spool folder no worker of this cluster used yet (a spool is emptied when its worker
        starts: a replacement must not empty the folder of the worker it replaces)."""
        index, self._made = self._made, self._made + 1
        if self.spool_root:
            return os.path.join(self.spool_root, f"worker-{index}")
        # sharing nothing and no root given: each worker's folder is made apart, no path relates them
        return tempfile.mkdtemp(prefix="datafusion-distributed-worker-")

    def _start(self, index: int, timeout: float) -> None:
        command = [
            sys.executable, "-m", "datafusion_distributed", "worker",
            "--host", self.hosts[index], "--port", "0", "--spool-dir", self.spools[index],
            "--parent-pid", str(os.getpid()), "--drain-timeout", str(self.drain_timeout),
            *self.worker_args,
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
        output = self.processes[index].stdout
        if output is not None:
            output.close()
        self._start(index, start_timeout)

    # -- changing size --------------------------------------------------------------------
    def scale(self, n: int, start_timeout: float = 30.0, host: str = "127.0.0.1") -> list[int]:
        """Run `n` workers from now on: start the missing ones (listening on `host`), or drain
        the last ones, all at once (see `drain`). Returns the exit codes of the workers drained.

        Raises:
            ValueError: `n` is below 1.
        """
        if n < 1:
            raise ValueError("a local cluster needs at least one worker")
        with self._lock:
            while len(self.processes) < n:
                self.hosts.append(host)
                self.spools.append(self._new_spool())
                self._start(len(self.processes), start_timeout)
            leaving = [self._unlist(len(self.processes) - 1) for _ in range(len(self.processes) - n)]
        for process in leaving:
            process.send_signal(signal.SIGTERM)
        return [self._wait_drained(p) for p in reversed(leaving)]

    def drain(self, index: int) -> int:
        """Drain worker `index` and wait for it to exit; its exit code (0 when it drained, or when
        `drain_timeout` ran out first). It is unlisted at once, so queries send it no new task,
        and told to drain (SIGTERM): it finishes its running tasks and serves the outputs it
        holds until their queries release them. The workers after it move up one index."""
        with self._lock:
            process = self._unlist(index)
        process.send_signal(signal.SIGTERM)
        return self._wait_drained(process)

    def replace(self, index: int, start_timeout: float = 30.0) -> int:
        """Start a new worker in worker `index`'s place (a spool of its own, a new URL), then
        drain the old one (see `drain`): one step of a rolling restart. Returns the old worker's
        exit code."""
        with self._lock:
            old = self.processes[index]
            self._leaving.append(old)
            self.spools[index] = self._new_spool()
            self._start(index, start_timeout)  # listed in its place once it listens
        old.send_signal(signal.SIGTERM)
        return self._wait_drained(old)

    def _unlist(self, index: int) -> subprocess.Popen:
        """Take worker `index` out of the cluster's lists (its URL is no longer resolved); its
        spool goes as it exits (see `_start`)."""
        process = self.processes.pop(index)
        del self.urls[index], self.hosts[index], self.spools[index]
        self._leaving.append(process)
        return process

    def _wait_drained(self, process: subprocess.Popen) -> int:
        """Wait for a drained worker to exit (killed if it outlives its drain by 10 seconds)."""
        try:
            code = process.wait(self.drain_timeout + 10)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        if process.stdout:
            process.stdout.close()
        with self._lock:
            if process in self._leaving:
                self._leaving.remove(process)
        return code

    def spool_files(self) -> list[str]:
        """Every file of the queries in the workers' spools (to see that queries clean up after them)."""
        return [f for spool in self.spools for f in query_files(spool)]

    def close(self) -> None:
        """Stop the workers at once (SIGINT, then SIGKILL after 10 seconds) and delete the spools the
        cluster made; closing twice does nothing."""
        with self._lock:
            every = self.processes + self._leaving
            for process in every:
                if process.poll() is None:
                    process.send_signal(signal.SIGINT)  # at once: SIGTERM would drain them
            deadline = time.monotonic() + 10
            for process in every:
                try:
                    process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                if process.stdout:
                    process.stdout.close()
            self.processes, self._leaving = [], []
            if self._own_root and self.spool_root is not None:
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
    output = process.stdout
    assert output is not None  # workers are started with their output piped
    reader = threading.Thread(target=lambda: result.append(output.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    line = result[0].strip() if result else ""
    if not line.startswith("listening on "):
        process.kill()
        if (code := process.wait()) > 0:  # it stopped by itself: its error went to standard error
            raise RuntimeError(f"worker process exited with status {code} before listening")
        raise RuntimeError(f"worker process did not start within {timeout}s (printed {line!r})")
    return line.removeprefix("listening on ")
