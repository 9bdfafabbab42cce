"""DnsResolver: worker URLs from a DNS name's addresses, with DNS answers faked at the
resolver's boundary (its `lookup` function, socket.getaddrinfo's shape) and one real lookup."""

from __future__ import annotations

import logging
import socket
import urllib.parse

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    DnsResolver,
    FlightWorker,
    WorkerResolver,
    WorkersNotFound,
)

HOST = "workers.analytics.svc.cluster.local"


def _entry(address: str, port: int = 50051) -> tuple:
    """One getaddrinfo entry for `address`, as the system resolver returns it."""
    if ":" in address:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))


class FakeDns:
    """The answers of a DNS server whose records change as pods come and go; counts lookups."""

    def __init__(self, *addresses: str):
        self.answer: list[str] | OSError = list(addresses)
        self.lookups: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[tuple]:
        self.lookups.append((host, port))
        if isinstance(self.answer, OSError):
            raise self.answer
        return [_entry(a, port) for a in self.answer]


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _resolver(dns: FakeDns, clock: Clock, **options) -> DnsResolver:
    return DnsResolver(HOST, port=50051, lookup=dns, clock=clock, **options)


def test_every_address_becomes_a_url_sorted_once_each_ipv6_bracketed():
    dns = FakeDns("10.0.0.10", "fd00::2", "10.0.0.9", "10.0.0.10", "fd00::1")
    urls = _resolver(dns, Clock()).get_urls()
    assert urls == [
        "grpc://10.0.0.9:50051",
        "grpc://10.0.0.10:50051",
        "grpc://[fd00::1]:50051",
        "grpc://[fd00::2]:50051",
    ]
    assert dns.lookups == [(HOST, 50051)]
    assert all(urllib.parse.urlsplit(u).port == 50051 for u in urls)  # brackets make them valid URLs


def test_the_scheme_is_used_for_every_url():
    resolver = DnsResolver(HOST, port=443, scheme="grpc+tls", lookup=FakeDns("10.0.0.1"), clock=Clock())
    assert resolver.get_urls() == ["grpc+tls://10.0.0.1:443"]


def test_an_answer_is_reused_for_refresh_seconds_then_pods_that_came_and_went_are_seen():
    dns, clock = FakeDns("10.0.0.1", "10.0.0.2"), Clock()
    resolver = _resolver(dns, clock, refresh=5.0)
    assert resolver.get_urls() == ["grpc://10.0.0.1:50051", "grpc://10.0.0.2:50051"]
    dns.answer = ["10.0.0.2", "10.0.0.3"]  # one pod gone, one new
    clock.now += 4.9
    assert resolver.get_urls() == ["grpc://10.0.0.1:50051", "grpc://10.0.0.2:50051"]
    assert len(dns.lookups) == 1
    clock.now += 0.2
    assert resolver.get_urls() == ["grpc://10.0.0.2:50051", "grpc://10.0.0.3:50051"]
    assert len(dns.lookups) == 2


def test_refresh_zero_looks_up_at_every_call():
    dns = FakeDns("10.0.0.1")
    resolver = _resolver(dns, Clock(), refresh=0)
    for _ in range(3):
        resolver.get_urls()
    assert len(dns.lookups) == 3


def test_a_name_that_does_not_resolve_is_an_error_naming_the_host_and_the_cause():
    dns = FakeDns()
    dns.answer = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    with pytest.raises(WorkersNotFound, match=rf"{HOST}.*did not resolve: .*Name or service not known"):
        _resolver(dns, Clock()).get_urls()


def test_a_name_without_addresses_is_an_error_naming_the_host():
    with pytest.raises(WorkersNotFound, match=rf"{HOST}.*resolved to no address"):
        _resolver(FakeDns(), Clock()).get_urls()


def test_the_last_good_answer_outlives_a_brief_outage_then_the_error_shows(caplog):
    dns, clock = FakeDns("10.0.0.1"), Clock()
    resolver = _resolver(dns, clock, refresh=5.0, max_stale=30.0)
    assert resolver.get_urls() == ["grpc://10.0.0.1:50051"]
    dns.answer = TimeoutError("timed out")
    clock.now += 10
    with caplog.at_level(logging.WARNING, logger="datafusion_distributed.protocol.resolver"):
        assert resolver.get_urls() == ["grpc://10.0.0.1:50051"]
    assert f"{HOST!r} did not resolve: timed out; using its last answer, 10s old" in caplog.text
    clock.now += 20  # 30 s after the last good answer
    with pytest.raises(WorkersNotFound, match="did not resolve: timed out"):
        resolver.get_urls()
    dns.answer = ["10.0.0.4"]  # DNS is back
    assert resolver.get_urls() == ["grpc://10.0.0.4:50051"]


def test_an_empty_answer_also_falls_back_to_the_last_good_one_while_it_is_recent():
    dns, clock = FakeDns("10.0.0.1"), Clock()
    resolver = _resolver(dns, clock, refresh=1.0, max_stale=30.0)
    resolver.get_urls()
    dns.answer = []
    clock.now += 2
    assert resolver.get_urls() == ["grpc://10.0.0.1:50051"]


def test_max_stale_zero_fails_at_once():
    dns, clock = FakeDns("10.0.0.1"), Clock()
    resolver = _resolver(dns, clock, refresh=1.0, max_stale=0)
    resolver.get_urls()
    dns.answer = OSError("network unreachable")
    clock.now += 2
    with pytest.raises(WorkersNotFound, match="network unreachable"):
        resolver.get_urls()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"host": "grpc://workers:50051"}, "bare DNS name"),
        ({"host": ""}, "bare DNS name"),
        ({"host": "workers", "port": 0}, "port must be an integer from 1 to 65535"),
        ({"host": "workers", "port": "50051"}, "port must be an integer"),
        ({"host": "workers", "scheme": "http"}, "scheme must be one of grpc, grpc\\+tcp, grpc\\+tls"),
        ({"host": "workers", "refresh": -1}, "refresh must be a number of seconds >= 0"),
        ({"host": "workers", "max_stale": float("nan")}, "max_stale must be a number of seconds"),
    ],
)
def test_bad_arguments_are_refused_when_made(arguments, message):
    with pytest.raises(ValueError, match=message):
        DnsResolver(**arguments)


def test_localhost_resolves_for_real():
    resolver = DnsResolver("localhost", port=50051)
    assert isinstance(resolver, WorkerResolver)
    urls = resolver.get_urls()
    assert urls and set(urls) <= {"grpc://127.0.0.1:50051", "grpc://[::1]:50051"}


def test_a_query_runs_on_the_workers_dns_names(tmp_path):
    """A real lookup of an address literal, then the DNS answer the query's workers come from."""
    worker = FlightWorker(str(tmp_path / "spool"), auth_token="dns-test-token")
    try:
        port = int(worker.url.rsplit(":", 1)[1])
        ctx = SessionContext()
        ctx.register_record_batches(
            "t", [[pa.record_batch({"k": list(range(100)), "g": [i % 3 for i in range(100)]})]]
        )
        query = "SELECT g, count(*) AS n, sum(k) AS s FROM t GROUP BY g ORDER BY g"
        resolver = DnsResolver("127.0.0.1", port=port)
        config = DistributedConfig(auth_token="dns-test-token")
        with DistributedContext(ctx, workers=resolver, config=config) as dctx:
            assert dctx.workers() == [worker.url]
            assert dctx.sql(query).to_arrow_table() == ctx.sql(query).to_arrow_table()
    finally:
        worker.stop()
