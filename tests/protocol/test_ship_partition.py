"""`do_put` of a shipped memory table's partition: checked like every call, validated, quota-charged."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from datafusion_distributed import EmbeddedCluster
from datafusion_distributed.errors import WorkerError
from datafusion_distributed.protocol.auth import connect_options
from datafusion_distributed.protocol.flight import ClientConfig, ClientPool
from datafusion_distributed.protocol.messages import (
    ProtocolError,
    ShipPartition,
    decode_ship_partition,
    encode,
)

BATCH = pa.record_batch({"k": list(range(1000)), "s": [f"row-{i}" for i in range(1000)]})


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(1, spool_quota_bytes=200_000) as c:
        yield c


def client(cluster):
    return ClientPool(ClientConfig(timeout=5, task_timeout=10, auth_token=cluster.auth_token)).get(
        cluster.get_urls()[0]
    )


def test_a_partition_is_stored_as_a_task_output_and_released_with_its_query(cluster):
    result, schema = client(cluster).put_partition(ShipPartition("query-a", 3, 1, "lz4"), [BATCH, BATCH])
    assert (result.partition, result.rows) == (1, 2000) and schema == BATCH.schema
    assert result.path.endswith("query-a/stage-3/task-0/attempt-0/part-1.arrow")
    assert pa.ipc.open_file(result.path).read_all().num_rows == 2000
    client(cluster).release("query-a")
    assert cluster.spool_files() == []


def test_an_empty_partition_is_not_sent(cluster):
    result, schema = client(cluster).put_partition(ShipPartition("query-b", 3, 0), [])
    assert (result.path, result.rows, schema) == (None, 0, None)


def test_a_partition_past_the_quota_is_refused(cluster):
    with pytest.raises(WorkerError, match="spool quota exceeded"):
        client(cluster).put_partition(ShipPartition("query-c", 3, 0), [BATCH] * 50)
    client(cluster).release("query-c")
    assert cluster.workers[0].spool.used_bytes() == 0


def test_a_put_without_the_token_is_refused(cluster):
    raw = flight.connect(cluster.get_urls()[0], **connect_options(None, None))
    descriptor = flight.FlightDescriptor.for_command(encode(ShipPartition("query-d", 3, 0)))
    with pytest.raises(flight.FlightUnauthenticatedError):
        writer, _ = raw.do_put(descriptor, BATCH.schema, flight.FlightCallOptions(timeout=5))
        writer.write_batch(BATCH)
        writer.close()
    raw.close()


@pytest.mark.parametrize(
    "body, error",
    [
        (b'{"version": 1, "query_id": "../x", "stage": 0, "partition": 0}', "query_id must match"),
        (b'{"version": 1, "query_id": "q", "stage": -1, "partition": 0}', "stage"),
        (
            b'{"version": 1, "query_id": "q", "stage": 0, "partition": 0, "compression": "gzip"}',
            "compression",
        ),
        (b'{"version": 1, "query_id": "q", "stage": 0}', "missing fields"),
    ],
)
def test_bad_messages_are_refused_naming_the_field(body, error):
    with pytest.raises(ProtocolError, match=error):
        decode_ship_partition(body)
