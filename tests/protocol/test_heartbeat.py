"""The `heartbeat` action: validated like every message, and renewing the leases it names."""

from __future__ import annotations

import json

import pytest

from datafusion_distributed import EmbeddedCluster
from datafusion_distributed.errors import WorkerError
from datafusion_distributed.protocol.flight import ClientConfig, ClientPool
from datafusion_distributed.protocol.messages import (
    MAX_HEARTBEAT_QUERIES,
    PROTOCOL_VERSION,
    Heartbeat,
    ProtocolError,
    decode_heartbeat,
    encode,
)

QUERY = "q" * 32


def body(**fields) -> bytes:
    return json.dumps({"version": PROTOCOL_VERSION, **fields}).encode()


def test_a_heartbeat_round_trips():
    assert decode_heartbeat(encode(Heartbeat((QUERY, "other-1")))) == Heartbeat((QUERY, "other-1"))


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (body(query_ids=["../etc"]), "query_id must match"),
        (body(query_ids=[7]), "query_id must match"),
        (body(query_ids="q"), "query_ids must be a list"),
        (body(query_ids=[QUERY] * (MAX_HEARTBEAT_QUERIES + 1)), "query_ids must be a list of at most"),
        (body(), "missing fields"),
        (body(query_ids=[], extra=1), "unknown fields"),
        (json.dumps({"version": 99, "query_ids": []}).encode(), "unsupported protocol version"),
    ],
)
def test_a_bad_heartbeat_is_refused_naming_the_field(message, reason):
    with pytest.raises(ProtocolError, match=reason):
        decode_heartbeat(message)


def test_the_worker_renews_the_leases_a_heartbeat_names_and_refuses_a_bad_one():
    with EmbeddedCluster(1) as cluster:
        worker = cluster.workers[0]
        client = ClientPool(ClientConfig(auth_token=cluster.auth_token)).get(worker.url)
        client.heartbeat((QUERY,), timeout=10)
        assert QUERY in worker.spool._leases
        with pytest.raises(WorkerError, match="refused message: query_id must match"):
            client.heartbeat(("../../etc",), timeout=10)
        client.close()
