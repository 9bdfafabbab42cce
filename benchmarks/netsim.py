"""A simulated network for worker processes on one Linux machine: a network namespace per
worker, joined to this (root) namespace by a veth pair whose two ends are rate-limited with
`tc`, and a delaying TCP proxy per worker in the root namespace.

    root namespace                                 namespace dfdb<id>-<i>
    coordinator ──▶ proxy i (10.213.i.1:P) ──veth──▶ worker i (10.213.i.2:Q)
    worker j ──veth j──▶ proxy i ──veth i──▶ worker i

Every call, the coordinator's and the workers' own fetches from each other, goes to a proxy's
URL, so it crosses one or two shaped links and one proxy. The rate is the kernel's (a `tbf`
qdisc on both ends of each veth); the delay is the proxy's, as this kernel has no `netem`
qdisc: each chunk it forwards is held `delay` seconds (one way), so a round trip between any
two processes takes at least twice that. The proxy reads ahead into a bounded buffer, so it
adds latency without cutting the bandwidth a long transfer gets.

Needs root, `ip` and `tc` (iproute2). Everything made here is removed by `close()`, which the
benchmark calls in a `finally` (also on Ctrl-C, SIGTERM and SIGHUP); namespaces a killed run
left behind are removed by the next run (`remove_leftovers`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

PREFIX = "dfdb"  # names of namespaces and veth ends this module makes: dfdb<pid>-<i>, dfdb<pid>h<i>
SUBNET = "10.213"  # worker i: 10.213.<i>.2 in its namespace, 10.213.<i>.1 for the root end
CHUNK = 256 * 1024
BUFFERED_CHUNKS = 64  # per direction of one connection: reads ahead at most 16 MiB


@dataclass(frozen=True)
class NetworkSetting:
    """A link's rate (None: unlimited) and one-way delay, e.g. `NetworkSetting.parse("1gbit/1ms")`."""

    name: str
    rate_mbit: float | None
    delay_ms: float

    @classmethod
    def parse(cls, text: str) -> NetworkSetting:
        """From "unlimited", "<rate>[k|m|g]bit/<delay>ms" or "<rate>[k|m|g]bit"."""
        text = text.strip().lower()
        if text == "unlimited":
            return cls("unlimited", None, 0.0)
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg])bit(?:/(\d+(?:\.\d+)?)ms)?", text)
        if not match:
            raise ValueError(
                f"a network setting looks like unlimited, 1gbit/1ms or 100mbit/5ms, got {text!r}"
            )
        number, unit, delay = match.groups()
        rate = float(number) * {"k": 0.001, "m": 1.0, "g": 1000.0}[unit]
        if rate <= 0:
            raise ValueError(f"a network rate must be positive, got {text!r}")
        return cls(text, rate, float(delay or 0.0))

    @property
    def bytes_per_second(self) -> float | None:
        """The rate in bytes per second (None: unlimited)."""
        return None if self.rate_mbit is None else self.rate_mbit * 1e6 / 8


def namespaces_available() -> str | None:
    """None if this process can make network namespaces and veth pairs with `tbf`, else why not."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    name = f"{PREFIX}{os.getpid()}-probe"
    try:
        _run("ip", "netns", "add", name)
    except RuntimeError as exc:
        return f"cannot make a network namespace: {exc}"
    try:
        _run("ip", "netns", "exec", name, "ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        _run("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "p0", "root", *_tbf(100.0))
    except RuntimeError as exc:
        return f"cannot make a rate-limited veth pair: {exc}"
    finally:
        _run("ip", "netns", "del", name, check=False)
    return None


def remove_leftovers() -> list[str]:
    """Delete the namespaces (and with them their veth pairs) of runs whose process is gone."""
    listed = _run("ip", "netns", "list", check=False)
    removed = []
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(rf"{PREFIX}(\d+)-\w+", name)
        if match and not _alive(int(match.group(1))):
            _run("ip", "netns", "del", name, check=False)
            removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run(*command: str, check: bool = True) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _tbf(rate_mbit: float) -> list[str]:
    """A tbf qdisc for `rate_mbit`: a burst of 10 ms at the rate (at least 64 KiB, so a GSO
    packet fits) and a queue of 100 ms."""
    burst = max(64 * 1024, int(rate_mbit * 1e6 / 8 / 100))
    return ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "100ms"]


# -- the delaying proxy -----------------------------------------------------------------------


def _pump(source: socket.socket, target: socket.socket, delay: multiprocessing.Value) -> None:
    """Forward `source` to `target`, each chunk `delay.value` seconds after it arrived."""
    chunks: queue.Queue = queue.Queue(BUFFERED_CHUNKS)

    def read() -> None:
        try:
            while data := source.recv(CHUNK):
                chunks.put((time.monotonic() + delay.value, data))
        except OSError:
            pass
        chunks.put((time.monotonic() + delay.value, b""))

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            due, data = chunks.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                target.shutdown(socket.SHUT_WR)
                return
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            source.shutdown(socket.SHUT_RD)


def _serve_one(listener: socket.socket, target: tuple[str, int], delay: multiprocessing.Value) -> None:
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection(target, timeout=10)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b, delay), daemon=True).start()


def serve_proxies(
    routes: list[tuple[str, str, int]], delay: multiprocessing.Value, ports: multiprocessing.Queue
) -> None:
    """Listen on each route's host (a free port) and forward to its (host, port), delaying every
    chunk by `delay.value` seconds; put the ports listened on into `ports`, in route order.
    Runs until the process is terminated (a process of its own: it copies every byte)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the benchmark stops it, after its clean-up
    listeners = []
    for host, target_host, target_port in routes:
        listener = socket.create_server((host, 0), backlog=64)
        listeners.append(listener)
        threading.Thread(
            target=_serve_one, args=(listener, (target_host, target_port), delay), daemon=True
        ).start()
    ports.put([listener.getsockname()[1] for listener in listeners])
    threading.Event().wait()


class DelayProxies:
    """`serve_proxies` in a process of its own; `delay_ms` may be changed while it runs."""

    def __init__(self, routes: list[tuple[str, str, int]], timeout: float = 30.0):
        context = multiprocessing.get_context("spawn")
        self.delay = context.Value("d", 0.0, lock=False)
        ports = context.Queue()
        self.process = context.Process(target=serve_proxies, args=(routes, self.delay, ports), daemon=True)
        self.process.start()
        try:
            self.ports: list[int] = ports.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise RuntimeError(f"the proxies did not start within {timeout}s") from None

    def set_delay_ms(self, delay_ms: float) -> None:
        """Hold every chunk this long (one way) from now on."""
        self.delay.value = delay_ms / 1000.0

    def close(self) -> None:
        """Stop the proxy process."""
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(10)


# -- workers in namespaces ----------------------------------------------------------------------


class NamespaceCluster:
    """`n` worker processes, each in a network namespace of its own, reached through delaying
    proxies (a resolver: `get_urls()` lists the proxies' URLs). They share nothing: each has a
    spool folder of its own and no shared spool root, so every exchange crosses the network.

    `shape(setting)` sets the rate of every link and the proxies' delay."""

    def __init__(self, n: int, auth_token: str, start_timeout: float = 60.0):
        self.n = n
        self.auth_token = auth_token
        self.id = os.getpid()
        self.namespaces: list[str] = []
        self.links: list[str] = []
        self.processes: list[subprocess.Popen] = []
        self.spools: list[str] = []
        self.proxies: DelayProxies | None = None
        self.urls: list[str] = []
        try:
            for i in range(n):
                self._make_namespace(i)
            routes = []
            for i in range(n):
                host, port = self._start_worker(i, start_timeout)
                routes.append((f"{SUBNET}.{i}.1", host, port))
            self.proxies = DelayProxies(routes)
            self.urls = [
                f"grpc://{host}:{port}" for (host, _, _), port in zip(routes, self.proxies.ports, strict=True)
            ]
        except BaseException:
            self.close()
            raise

    def _make_namespace(self, i: int) -> None:
        namespace, root_end, worker_end = (
            f"{PREFIX}{self.id}-{i}",
            f"{PREFIX}{self.id}h{i}",
            f"{PREFIX}{self.id}w{i}",
        )
        _run("ip", "netns", "add", namespace)
        self.namespaces.append(namespace)
        _run("ip", "link", "add", root_end, "type", "veth", "peer", "name", worker_end)
        self.links.append(root_end)
        _run("ip", "link", "set", worker_end, "netns", namespace)
        _run("ip", "addr", "add", f"{SUBNET}.{i}.1/24", "dev", root_end)
        _run("ip", "link", "set", root_end, "up")
        inside = ["ip", "netns", "exec", namespace]
        _run(*inside, "ip", "addr", "add", f"{SUBNET}.{i}.2/24", "dev", worker_end)
        _run(*inside, "ip", "link", "set", worker_end, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "route", "add", "default", "via", f"{SUBNET}.{i}.1")

    def _start_worker(self, i: int, timeout: float) -> tuple[str, int]:
        host = f"{SUBNET}.{i}.2"
        spool = tempfile.mkdtemp(prefix="datafusion-distributed-netns-worker-")
        self.spools.append(spool)
        command = [
            "ip", "netns", "exec", self.namespaces[i],
            sys.executable, "-m", "datafusion_distributed", "worker", "--host", host, "--port", "0",
            "--spool-dir", spool, "--remove-spool-on-exit", "--parent-pid", str(os.getpid()),
        ]  # fmt: skip
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # Ctrl-C reaches the benchmark, which stops the workers itself
            env={**os.environ, "DATAFUSION_DISTRIBUTED_TOKEN": self.auth_token},
        )
        self.processes.append(process)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        first = line[0].strip() if line else ""
        if not first.startswith("listening on "):
            raise RuntimeError(
                f"worker {i} in namespace {self.namespaces[i]} did not start (printed {first!r})"
            )
        return host, int(first.rsplit(":", 1)[1])

    def get_urls(self) -> list[str]:
        """The proxies' URLs: the cluster is a resolver."""
        return list(self.urls)

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (`ip netns exec` runs the worker in its own process)."""
        return [p.pid for p in self.processes]

    def shape(self, setting: NetworkSetting) -> None:
        """Limit both ends of every worker's link to `setting`'s rate and set the proxies' delay."""
        for i, root_end in enumerate(self.links):
            worker_end = f"{PREFIX}{self.id}w{i}"
            inside = ["ip", "netns", "exec", self.namespaces[i]]
            if setting.rate_mbit is None:
                _run("tc", "qdisc", "del", "dev", root_end, "root", check=False)
                _run(*inside, "tc", "qdisc", "del", "dev", worker_end, "root", check=False)
            else:
                _run("tc", "qdisc", "replace", "dev", root_end, "root", *_tbf(setting.rate_mbit))
                _run(*inside, "tc", "qdisc", "replace", "dev", worker_end, "root", *_tbf(setting.rate_mbit))
        if self.proxies is not None:
            self.proxies.set_delay_ms(setting.delay_ms)

    def close(self) -> None:
        """Stop the workers and the proxies, delete the spools, veth pairs and namespaces."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout:
                process.stdout.close()
        self.processes = []
        if self.proxies is not None:
            self.proxies.close()
            self.proxies = None
        for link in self.links:
            _run("ip", "link", "del", link, check=False)  # deletes its peer too
        for namespace in self.namespaces:
            _run("ip", "netns", "del", namespace, check=False)
        self.links, self.namespaces = [], []
        for spool in self.spools:
            shutil.rmtree(spool, ignore_errors=True)

    def __enter__(self) -> NamespaceCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
