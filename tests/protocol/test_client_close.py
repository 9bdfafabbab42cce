"""Closing a WorkerClient while calls use its connection: the connection is closed when the
last of them ends, never under them (closing a Flight connection under a call crashes the
process, as a lost worker's release still running when its context closed once did)."""

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from datafusion_distributed.protocol.flight import WorkerClient

NOWHERE = "grpc://127.0.0.1:1"  # nothing listens: calls fail fast, but the connection is real


def is_closed(connection: flight.FlightClient) -> bool:
    """Whether `connection` was closed: a closed one refuses calls before trying the network."""
    try:
        list(connection.list_actions(flight.FlightCallOptions(timeout=2)))
    except pa.ArrowInvalid as exc:
        return "closed" in str(exc)
    except flight.FlightError:  # it tried to connect: still open
        return False
    return False


def test_a_connection_in_use_is_closed_by_the_last_call_to_end():
    client = WorkerClient(NOWHERE)
    with client._connection() as first, client._connection() as second:
        assert first is second
        client.close()
        assert not is_closed(first)  # two calls still use it
        with client._connection() as fresh:  # a call after close opens a new connection
            assert fresh is not first
    assert is_closed(first)
    assert not is_closed(fresh)  # the client's current connection stays open
    client.close()
    assert is_closed(fresh)


def test_an_idle_connection_is_closed_at_once():
    client = WorkerClient(NOWHERE)
    with client._connection() as connection:
        pass
    client.close()
    assert is_closed(connection)


def test_a_failing_call_gives_its_connection_back():
    client = WorkerClient(NOWHERE)
    with pytest.raises(RuntimeError), client._connection() as connection:
        raise RuntimeError("the call failed")
    client.close()
    assert is_closed(connection)
