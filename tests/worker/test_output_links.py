"""A worker serves task outputs only from real files inside its own spool: a link planted in a
spool folder (to a file or a folder elsewhere) is refused, by `do_get` and by `read_output`."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from datafusion_distributed import EmbeddedCluster
from datafusion_distributed.protocol.auth import connect_options
from datafusion_distributed.protocol.messages import TaskKey, Ticket, encode

OPTIONS = flight.FlightCallOptions(timeout=20)


@pytest.fixture(scope="module")
def worker():
    with EmbeddedCluster(1) as cluster:
        client = flight.connect(cluster.get_urls()[0], **connect_options(cluster.auth_token, None))
        yield cluster.workers[0], client
        client.close()


def _arrow_file(path, column: str) -> None:
    table = pa.table({column: [42]})
    with pa.ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)


def _calls(client, query_id: str):
    ticket = encode(Ticket(query_id, 0, 0, 0))
    return (
        lambda: client.do_get(flight.Ticket(ticket), OPTIONS).read_all(),
        lambda: b"".join(
            r.body.to_pybytes() for r in client.do_action(flight.Action("read_output", ticket), OPTIONS)
        ),
    )


def test_a_link_to_a_file_outside_the_spool_is_not_served(worker, tmp_path):
    server, client = worker
    _arrow_file(tmp_path / "secret.arrow", "secret")
    path = server.spool.output_path("linkedfile", 0, 0, 0)
    os.makedirs(os.path.dirname(path))
    os.symlink(tmp_path / "secret.arrow", path)
    try:
        for call in _calls(client, "linkedfile"):
            with pytest.raises(flight.FlightServerError, match="refused output .* not a file inside") as info:
                call()
            assert "Traceback" not in str(info.value)
    finally:
        server.spool.release("linkedfile")


def test_a_linked_folder_leading_outside_the_spool_is_not_served(worker, tmp_path):
    server, client = worker
    _arrow_file(tmp_path / "part-0.arrow", "secret")
    task_dir = server.spool.attempt_dir(TaskKey("linkedfolder", 0, 0, 0))
    os.makedirs(os.path.dirname(task_dir))
    os.symlink(tmp_path, task_dir)
    try:
        for call in _calls(client, "linkedfolder"):
            with pytest.raises(flight.FlightServerError, match="refused output .* not a file inside"):
                call()
    finally:
        server.spool.release("linkedfolder")


def test_a_real_output_in_the_spool_is_served(worker):
    server, client = worker
    path = server.spool.output_path("realoutput", 0, 0, 0)
    os.makedirs(os.path.dirname(path))
    _arrow_file(path, "mine")
    try:
        table_call, bytes_call = _calls(client, "realoutput")
        assert table_call().to_pylist() == [{"mine": 42}]
        with open(path, "rb") as f:
            assert bytes_call() == f.read()
    finally:
        server.spool.release("realoutput")


def test_an_output_that_is_not_arrow_is_refused_without_a_traceback(worker):
    server, client = worker
    path = server.spool.output_path("notarrow", 0, 0, 0)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"not an arrow file")
    try:
        table_call, _ = _calls(client, "notarrow")
        with pytest.raises(flight.FlightServerError, match="could not read output file") as info:
            table_call()
        assert "Traceback" not in str(info.value)
    finally:
        server.spool.release("notarrow")
