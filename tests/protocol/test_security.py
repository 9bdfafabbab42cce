"""Workers refuse calls without the cluster's token, and serve TLS with certificates in config."""

from __future__ import annotations

import os
import subprocess
import sys
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
)
from datafusion_distributed.protocol.auth import TOKEN_ENV, connect_options
from datafusion_distributed.protocol.messages import Ticket, encode
from tests.support.certificates import self_signed_pair

SQL = "SELECT k % 10 AS g, count(*) AS n FROM t GROUP BY 1 ORDER BY 1"
EXPECTED = [{"g": g, "n": 40} for g in range(10)]


def _ctx(table_dir) -> SessionContext:
    ctx = SessionContext()
    ctx.register_parquet("t", str(table_dir))
    return ctx


@pytest.fixture(scope="module")
def embedded():
    with EmbeddedCluster(2) as cluster:
        yield cluster


@pytest.mark.parametrize(
    "token, reason",
    [
        (None, "unauthenticated: the call carries no token"),
        ("not-the-token", "unauthenticated: the token does not match"),
    ],
)
def test_worker_refuses_calls_without_the_token(embedded, token, reason):
    client = flight.connect(embedded.get_urls()[0], **connect_options(token, None))
    options = flight.FlightCallOptions(timeout=5)
    for call in (
        lambda: list(client.do_action(flight.Action("health", b""), options)),
        lambda: list(client.do_action(flight.Action("release", b"{}"), options)),
        lambda: client.do_get(flight.Ticket(encode(Ticket("q", 0, 0, 0))), options).read_all(),
    ):
        with pytest.raises(flight.FlightUnauthenticatedError, match=reason):
            call()
    client.close()
    good = flight.connect(embedded.get_urls()[0], **connect_options(embedded.auth_token, None))
    assert list(good.do_action(flight.Action("health", b""), options))
    good.close()


def test_a_wrong_token_fails_the_query_at_once_naming_the_worker(embedded, table_dir):
    config = DistributedConfig(bytes_per_partition=1024, auth_token="not-the-token", check_workers="off")
    with DistributedContext(_ctx(table_dir), workers=embedded.get_urls(), config=config) as dctx:
        started = time.monotonic()
        with pytest.raises(QueryFailed, match=r"worker grpc://127\.0\.0\.1:\d+: unauthenticated") as info:
            dctx.sql(SQL).to_pylist()
        assert "attempts" not in str(info.value)  # refused, not retried as a lost worker
        assert time.monotonic() - started < 10
    config = DistributedConfig(bytes_per_partition=1024, auth_token=embedded.auth_token)
    with DistributedContext(_ctx(table_dir), workers=embedded.get_urls(), config=config) as dctx:
        assert dctx.sql(SQL).to_pylist() == EXPECTED
    assert embedded.spool_files() == []


def test_the_token_comes_from_the_environment(embedded, table_dir, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, embedded.auth_token)
    config = DistributedConfig(bytes_per_partition=1024)
    assert config.auth_token == embedded.auth_token and embedded.auth_token not in repr(config)
    with DistributedContext(_ctx(table_dir), workers=embedded.get_urls(), config=config) as dctx:
        assert dctx.sql(SQL).to_pylist() == EXPECTED


def _worker(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "datafusion_distributed", "worker", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def test_a_worker_without_a_token_refuses_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    process = _worker("--spool-dir", str(tmp_path / "a"), env=env)
    out, err = process.communicate(timeout=60)
    assert process.returncode != 0 and out == ""
    assert "refusing to start a worker without authentication" in err and "--insecure-no-auth" in err

    process = _worker("--spool-dir", str(tmp_path / "b"), "--insecure-no-auth", env=env)
    try:
        assert process.stdout.readline().startswith("listening on grpc://127.0.0.1:")
    finally:
        process.terminate()
        process.communicate(timeout=30)


# -- TLS ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    cert, key = self_signed_pair(tmp_path_factory.mktemp("tls"))
    with LocalCluster(2, worker_args=["--tls-cert", cert, "--tls-key", key]) as cluster:
        yield cluster, cert


def test_queries_run_over_tls_end_to_end(tls_cluster, table_dir):
    cluster, cert = tls_cluster
    assert all(url.startswith("grpc+tls://127.0.0.1:") for url in cluster.get_urls())
    config = DistributedConfig(bytes_per_partition=1024, tls_root_certs=cert)
    with DistributedContext(_ctx(table_dir), workers=cluster, config=config) as dctx:
        df = dctx.sql(SQL)
        assert len(df.distributed_plan().stages) > 2  # workers fetch from each other over TLS too
        assert df.to_pylist() == EXPECTED
    assert cluster.spool_files() == []


def test_a_client_without_the_root_certificate_fails_clearly(tls_cluster, table_dir):
    cluster, _ = tls_cluster
    config = DistributedConfig(bytes_per_partition=1024, connect_timeout=5)
    with DistributedContext(_ctx(table_dir), workers=cluster, config=config) as dctx:
        started = time.monotonic()
        with pytest.raises(QueryFailed, match="TLS handshake failed.*certificate verify failed") as info:
            dctx.sql(SQL).to_pylist()
        assert "attempts" not in str(info.value)
        assert time.monotonic() - started < 10
    plain = [url.replace("grpc+tls://", "grpc://") for url in cluster.get_urls()]
    with DistributedContext(_ctx(table_dir), workers=plain, config=config) as dctx:
        with pytest.raises(QueryFailed):  # a plaintext client cannot talk to a TLS worker
            dctx.sql(SQL).to_pylist()
