"""Worker resolution: any object with `get_urls() -> list[str]` tells a coordinator its workers.

StaticResolver (a fixed list), EnvResolver (an environment variable) and DnsResolver (the
addresses of a DNS name, such as a Kubernetes headless service).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from ..common.urls import WORKER_URL_SCHEMES, is_worker_url
from ..errors import WorkersNotFound

WORKERS_ENV = "DATAFUSION_DISTRIBUTED_WORKERS"


@runtime_checkable
class WorkerResolver(Protocol):
    """Anything that lists the worker URLs a coordinator may use; asked as every query starts
    and as each of its stages starts (at most once per `worker_refresh_seconds`)."""

    def get_urls(self) -> list[str]:
        """The worker URLs (`grpc://`, `grpc+tcp://` or `grpc+tls://`)."""
        ...


_SCHEMES_TEXT = f"{', '.join(WORKER_URL_SCHEMES[:-1])} or {WORKER_URL_SCHEMES[-1]}"


def _check_url(url: str) -> str:
    url = url.strip()
    if not is_worker_url(url):
        raise ValueError(f"worker URL {url!r} must start with {_SCHEMES_TEXT}")
    return url


class StaticResolver:
    """A fixed list of worker URLs."""

    def __init__(self, urls: Sequence[str]) -> None:
        if not urls:
            raise ValueError("at least one worker URL is needed")
        self._urls = [_check_url(u) for u in urls]

    def get_urls(self) -> list[str]:
        """The URLs given, checked once when the resolver was made."""
        return list(self._urls)


class EnvResolver:
    """Worker URLs from the comma-separated environment variable DATAFUSION_DISTRIBUTED_WORKERS,
    read at every query so a changed variable takes effect."""

    def __init__(self, variable: str = WORKERS_ENV) -> None:
        self.variable = variable

    def get_urls(self) -> list[str]:
        """The URLs in the variable now; ValueError when it lists none or one is not a worker URL."""
        raw = os.environ.get(self.variable, "")
        urls = [u for u in raw.split(",") if u.strip()]
        if not urls:
            raise ValueError(f"environment variable {self.variable} lists no worker URLs")
        return [_check_url(u) for u in urls]


# The seconds a DnsResolver reuses an answer, and keeps using its last good one while DNS fails.
DNS_REFRESH_SECONDS = 5.0
DNS_MAX_STALE_SECONDS = 30.0

# (family, type, proto, canonname, sockaddr), as socket.getaddrinfo returns them
AddressInfo = tuple[Any, Any, int, str, tuple]
Lookup = Callable[[str, int], Iterable[AddressInfo]]

log = logging.getLogger(__name__)


def _lookup_tcp(host: str, port: int) -> list[AddressInfo]:
    """Every address of `host` (A and AAAA records), one entry per address."""
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def _address_order(address: str) -> tuple[int, int, str]:
    """IPv4 before IPv6, then numerically (10.0.0.9 before 10.0.0.10)."""
    ip = ipaddress.ip_address(address)
    return ip.version, int(ip), address


class DnsResolver:
    """Worker URLs from the addresses a DNS name resolves to: every A and AAAA record of, say,
    a Kubernetes headless service ("workers.analytics.svc.cluster.local"), whose records are
    the IP addresses of its ready pods.

    An answer is reused for `refresh` seconds, so workers that start or stop are seen within
    that time, without a DNS query for every call. When a lookup fails (or finds no address),
    the last good answer is used for up to `max_stale` seconds after it was obtained, with a
    warning logged: a DNS server restarting does not fail queries whose workers are still
    there, and a worker that did go away is handled like any lost worker. Past that, or with
    no good answer yet, `get_urls()` raises WorkersNotFound naming the host.

    Args:
        host: the DNS name (no scheme, no port).
        port: the port every worker listens on.
        scheme: "grpc", "grpc+tcp" or "grpc+tls" (TLS: the workers' certificates must then be
            valid for their IP addresses, which is what the URLs name).
        refresh: seconds an answer is reused; 0 looks the name up at every call.
        max_stale: seconds the last good answer stays in use while lookups fail; 0 fails at once.
        lookup: `(host, port) -> getaddrinfo-style entries`; socket.getaddrinfo by default.
        clock: a monotonic clock in seconds; time.monotonic by default.
    """

    def __init__(
        self,
        host: str,
        port: int = 50051,
        *,
        scheme: str = "grpc",
        refresh: float = DNS_REFRESH_SECONDS,
        max_stale: float = DNS_MAX_STALE_SECONDS,
        lookup: Lookup = _lookup_tcp,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(host, str) or not host.strip() or any(c in host for c in "/ "):
            raise ValueError(
                f"DnsResolver needs a bare DNS name such as 'workers.analytics.svc.cluster.local', got {host!r}"
                " (give the port as port= and the scheme as scheme=)"
            )
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"DnsResolver port must be an integer from 1 to 65535, got {port!r}")
        if f"{scheme}://" not in WORKER_URL_SCHEMES:
            names = ", ".join(s.removesuffix("://") for s in WORKER_URL_SCHEMES)
            raise ValueError(f"DnsResolver scheme must be one of {names}, got {scheme!r}")
        for name, value in (("refresh", refresh), ("max_stale", max_stale)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise ValueError(f"DnsResolver {name} must be a number of seconds >= 0, got {value!r}")
        self.host = host.strip()
        self.port = port
        self.scheme = scheme
        self.refresh = float(refresh)
        self.max_stale = float(max_stale)
        self._lookup = lookup
        self._clock = clock
        self._lock = threading.Lock()  # one lookup at a time, however many queries ask
        self._urls: list[str] = []
        self._resolved_at = -float("inf")

    def __repr__(self) -> str:
        return f"DnsResolver({self.host!r}, port={self.port}, scheme={self.scheme!r})"

    def get_urls(self) -> list[str]:
        """The workers' URLs, sorted, one per address: the cached answer if it is younger than
        `refresh` seconds, else a new lookup (or, while lookups fail, the last good answer up to
        `max_stale` seconds old).

        Raises:
            WorkersNotFound: the name does not resolve, or to no address, and there is no recent
                good answer; the message names the host and the cause.
        """
        with self._lock:
            now = self._clock()
            if self._urls and now - self._resolved_at < self.refresh:
                return list(self._urls)
            try:
                self._urls = self._resolve()
                self._resolved_at = now
            except WorkersNotFound as exc:
                if not self._urls or now - self._resolved_at >= self.max_stale:
                    raise
                log.warning("%s; using its last answer, %.0fs old", exc, now - self._resolved_at)
            return list(self._urls)

    def _resolve(self) -> list[str]:
        try:
            entries = list(self._lookup(self.host, self.port))
        except OSError as exc:  # socket.gaierror, a timeout, ...
            raise WorkersNotFound(f"worker DNS name {self.host!r} did not resolve: {exc}") from exc
        addresses = {entry[4][0] for entry in entries}
        if not addresses:
            raise WorkersNotFound(f"worker DNS name {self.host!r} resolved to no address")
        return [self._url(a) for a in sorted(addresses, key=_address_order)]

    def _url(self, address: str) -> str:
        host = f"[{address}]" if ":" in address else address
        return f"{self.scheme}://{host}:{self.port}"
