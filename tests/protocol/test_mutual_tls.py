"""Mutual TLS: a worker given `tls_client_ca` refuses, during the TLS handshake, every client
without a certificate signed by one of those CAs; coordinators and workers that present one run
queries as before. And a call without the token is refused before the worker's code runs."""

from __future__ import annotations

import datetime
import ipaddress
import time

import pyarrow.flight as flight
import pytest
from datafusion import SessionContext

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    EmbeddedCluster,
    LocalCluster,
    QueryFailed,
    WorkerError,
)
from datafusion_distributed.protocol.auth import connect_options
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
from datafusion_distributed.protocol.messages import MAX_MESSAGE_BYTES, Ticket, encode
from datafusion_distributed.worker.flight_worker import FlightWorker
from tests.support.certificates import write_pem

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

SQL = "SELECT k % 10 AS g, count(*) AS n FROM t GROUP BY 1 ORDER BY 1"
EXPECTED = [{"g": g, "n": 40} for g in range(10)]
OPTIONS = flight.FlightCallOptions(timeout=10)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def make_ca(folder, name: str) -> dict[str, str]:
    """A CA, a certificate for localhost and 127.0.0.1 (a worker's, usable as a client's too)
    and a client certificate, both signed by the CA: paths of their PEM files."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        _builder(name, _name(name), ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": write_pem(folder, f"{name}-ca", ca, ca_key)[0]}
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    for stem, uses in (("worker", both), ("client", [ExtendedKeyUsageOID.CLIENT_AUTH])):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            _builder(f"{name} {stem}", ca.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(uses), critical=False)
        )
        if stem == "worker":
            addresses = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(addresses), critical=False)
        paths[f"{stem}_cert"], paths[f"{stem}_key"] = write_pem(
            folder, f"{name}-{stem}", builder.sign(ca_key, hashes.SHA256()), key
        )
    return paths


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    return make_ca(folder, "cluster"), make_ca(folder, "stranger")


@pytest.fixture(scope="module")
def mtls_cluster(pki):
    own, _ = pki
    with EmbeddedCluster(
        2,
        tls_cert=own["worker_cert"],
        tls_key=own["worker_key"],
        tls_root_certs=own["ca"],
        tls_client_ca=own["ca"],
        shared_spool_root=None,  # workers copy each other's outputs over (mutual) TLS
    ) as cluster:
        yield cluster


def _ctx(table_dir) -> SessionContext:
    ctx = SessionContext()
    ctx.register_parquet("t", str(table_dir))
    return ctx


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _health(url: str, token: str, ca: str, cert: str | None = None, key: str | None = None) -> dict:
    settings = ClientConfig(
        timeout=10,
        auth_token=token,
        tls_root_certs=_read(ca),
        tls_client_cert=_read(cert) if cert else None,
        tls_client_key=_read(key) if key else None,
    )
    client = WorkerClient(url, settings)
    try:
        return client.health()
    finally:
        client.close()


def test_a_client_without_an_accepted_certificate_is_refused_at_the_handshake(mtls_cluster, pki):
    own, stranger = pki
    url = mtls_cluster.get_urls()[0]
    assert url.startswith("grpc+tls://127.0.0.1:")
    for cert, key in ((None, None), (stranger["client_cert"], stranger["client_key"])):
        with pytest.raises(WorkerError, match="TLS handshake failed: the worker closed the connection"):
            _health(url, mtls_cluster.auth_token, own["ca"], cert, key)
        # the token does not help: the connection ends before any call is made
        raw = flight.connect(url, **connect_options(mtls_cluster.auth_token, _read(own["ca"]), None, None))
        with pytest.raises(flight.FlightUnavailableError, match="Socket closed"):
            list(raw.do_action(flight.Action("health", b""), OPTIONS))
        raw.close()
    assert (
        _health(url, mtls_cluster.auth_token, own["ca"], own["client_cert"], own["client_key"])["url"] == url
    )


def test_queries_run_with_a_client_certificate(mtls_cluster, pki, table_dir):
    own, _ = pki
    config = DistributedConfig(
        bytes_per_partition=1024,
        auth_token=mtls_cluster.auth_token,
        tls_root_certs=own["ca"],
        tls_client_cert=own["client_cert"],
        tls_client_key=own["client_key"],
    )
    with DistributedContext(_ctx(table_dir), workers=mtls_cluster.get_urls(), config=config) as dctx:
        df = dctx.sql(SQL)
        assert len(df.distributed_plan().stages) > 2  # workers fetch each other's outputs
        assert df.to_pylist() == EXPECTED
    assert mtls_cluster.spool_files() == []


def test_a_coordinator_without_a_certificate_fails_at_once_saying_why(mtls_cluster, pki, table_dir):
    own, _ = pki
    config = DistributedConfig(
        bytes_per_partition=1024, auth_token=mtls_cluster.auth_token, tls_root_certs=own["ca"]
    )
    with DistributedContext(_ctx(table_dir), workers=mtls_cluster.get_urls(), config=config) as dctx:
        started = time.monotonic()
        with pytest.raises(QueryFailed, match="asks for a client certificate.*tls_client_cert") as info:
            dctx.sql(SQL).to_pylist()
        assert "attempts" not in str(info.value)  # a setup error, not retried as a lost worker
        assert time.monotonic() - started < 10


def test_client_certificates_need_tls_and_come_in_pairs(pki, tmp_path):
    own, _ = pki
    with pytest.raises(ValueError, match="need the worker to serve TLS"):
        FlightWorker(str(tmp_path), auth_token="t", tls_client_ca=own["ca"])
    with pytest.raises(ValueError, match="tls_client_cert and tls_client_key must be given together"):
        DistributedConfig(tls_client_cert=own["client_cert"])


def test_the_worker_command_requires_client_certificates(pki):
    own, _ = pki
    args = ["--tls-cert", own["worker_cert"], "--tls-key", own["worker_key"], "--tls-client-ca", own["ca"]]
    with LocalCluster(1, worker_args=args) as cluster:
        url = cluster.get_urls()[0]
        with pytest.raises(WorkerError, match="asks for a client certificate"):
            _health(url, cluster.auth_token, own["ca"])
        assert (
            _health(url, cluster.auth_token, own["ca"], own["client_cert"], own["client_key"])["url"] == url
        )


# -- calls without the token ---------------------------------------------------------------------
def test_a_call_without_the_token_is_refused_before_the_worker_s_code_runs(monkeypatch):
    with EmbeddedCluster(1) as cluster:
        worker, url = cluster.workers[0], cluster.get_urls()[0]
        handled = []
        for name in ("do_action", "do_get", "list_actions"):
            method = getattr(worker, name)
            monkeypatch.setattr(
                worker, name, lambda *a, method=method, name=name: handled.append(name) or method(*a)
            )
        stranger = flight.connect(url)
        oversized = b"x" * (MAX_MESSAGE_BYTES + 1)
        for call in (
            lambda: list(stranger.do_action(flight.Action("run_task", oversized), OPTIONS)),
            lambda: list(stranger.do_action(flight.Action("health", b""), OPTIONS)),
            lambda: stranger.do_get(flight.Ticket(encode(Ticket("q", 0, 0, 0))), OPTIONS).read_all(),
            lambda: stranger.list_actions(OPTIONS),
        ):
            with pytest.raises(flight.FlightUnauthenticatedError, match="unauthenticated"):
                call()
        stranger.close()
        assert handled == []
        member = flight.connect(url, **connect_options(cluster.auth_token, None))
        assert list(member.do_action(flight.Action("health", b""), OPTIONS))
        member.close()
        assert handled == ["do_action"]
