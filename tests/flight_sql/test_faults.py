"""The endpoint under bad input and going clients: a wrong token is refused before any work,
a full server refuses with a clear error, a cancel or a client that goes away stops the query's
tasks, a restarted server gives clear errors and then serves again; TLS; the command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from datafusion_distributed import EmbeddedCluster
from datafusion_distributed.flight_sql import FlightSqlServer, ServeOptions
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from tests.flight_sql.conftest import connect, serving, tpch_statements
from tests.support.certificates import self_signed_pair

# a result far larger than what gRPC buffers: its stream is still running when the test acts
ENDLESS = "SELECT value, value * 2 AS twice FROM generate_series(1, 200000000)"
# minutes of work over several tasks, for a small answer: still running when the test acts
LONG = "SELECT count(*) AS n, sum(l_quantity * value) AS s FROM lineitem CROSS JOIN generate_series(1, 50000)"
# a client process that runs a query (argv: location, sql), to be killed in the middle
CLIENT = """
import sys
import adbc_driver_flightsql.dbapi as flight_sql
with flight_sql.connect(sys.argv[1], autocommit=True) as conn, conn.cursor() as cursor:
    cursor.execute(sys.argv[2])
    cursor.fetchall()
"""


def _eventually(check, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def _no_query_left(server, cluster: EmbeddedCluster) -> bool:
    """Nothing of a query runs: no statement streams, no worker holds a task or spooled data."""
    return not server.statements.running and server.admission.running == 0 and not cluster.spool_files()


def test_a_missing_or_wrong_token_is_refused_before_any_work():
    with serving(ServeOptions(auth_token="s3cret")) as server:
        for token in (None, "wrong"):
            with pytest.raises(Exception, match="UNAUTHENTICATED.*token"):
                with connect(server, token) as conn, conn.cursor() as cursor:
                    cursor.execute("SELECT 1")
        assert len(server.sessions) == 0  # no session was even made
        with connect(server, "s3cret") as conn, conn.cursor() as cursor:
            cursor.execute("SELECT 41 + 1")
            assert cursor.fetchall() == [(42,)]


def test_past_its_limits_the_server_refuses_saying_why():
    with (
        EmbeddedCluster(2) as cluster,
        serving(ServeOptions(max_running=1, max_queued=0), workers=cluster) as server,
        connect(server) as busy,
        connect(server) as other,
    ):
        with busy.cursor() as running:
            running.execute(ENDLESS)
            running.fetchone()  # its stream holds the one turn
            with other.cursor() as refused, pytest.raises(Exception, match="busy.*max_running=1"):
                refused.execute("SELECT 1")
                refused.fetchall()
        _eventually(lambda: _no_query_left(server, cluster))
        with other.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchall() == [(1,)]


@pytest.fixture
def cluster_and_server(tpch_sf001):
    """A server over an embedded cluster the test can look into."""
    with (
        EmbeddedCluster(2) as cluster,
        serving(ServeOptions(init=tpch_statements(tpch_sf001)), workers=cluster) as server,
    ):
        yield cluster, server


def test_a_cancel_stops_the_query_s_tasks(cluster_and_server):
    cluster, server = cluster_and_server
    with connect(server) as conn, conn.cursor() as cursor:
        failed: list[BaseException] = []

        def run() -> None:
            try:
                cursor.execute(LONG)
                cursor.fetchall()
            except Exception as exc:
                failed.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        _eventually(lambda: bool(server.statements.running) and bool(cluster.spool_files()))
        cursor.adbc_cancel()
        runner.join(timeout=30)
        assert not runner.is_alive() and failed, "the query was not stopped"
        assert "cancel" in str(failed[0]).lower(), failed[0]
        _eventually(lambda: _no_query_left(server, cluster))
        (dctx,) = server.sessions.contexts()
        assert_ran_distributed(dctx)


def _client_killed_once(server, sql: str, running) -> None:
    """Run `sql` in a client process of its own, killed once `running()` holds."""
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, server.location, sql], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _eventually(running)
    finally:
        client.kill()
        client.communicate(timeout=30)


def test_a_client_that_goes_away_mid_query_frees_it(cluster_and_server):
    cluster, server = cluster_and_server
    _client_killed_once(server, LONG, lambda: bool(server.statements.running) and bool(cluster.spool_files()))
    _eventually(lambda: _no_query_left(server, cluster))
    (dctx,) = server.sessions.contexts()
    assert_ran_distributed(dctx)


def test_a_client_that_goes_away_mid_result_frees_its_turn_and_query(cluster_and_server):
    cluster, server = cluster_and_server
    streaming_since: list[float] = []

    def streaming_a_while() -> bool:  # batches have been flowing for half a second
        if not (server.statements.running and server.admission.running == 1):
            return False
        streaming_since[:] = streaming_since or [time.monotonic()]
        return time.monotonic() - streaming_since[0] > 0.5

    _client_killed_once(server, ENDLESS, streaming_a_while)
    _eventually(lambda: _no_query_left(server, cluster))


def test_a_restarted_server_fails_clients_clearly_then_serves_them_again(tpch_sf001):
    options = ServeOptions(init=tpch_statements(tpch_sf001))
    with serving(options) as first:
        port = first.port
        conn = connect(first)
        with conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM nation")
            assert cursor.fetchall() == [(25,)]
    with conn.cursor() as cursor, pytest.raises(Exception, match="connection refused.*Unavailable"):
        cursor.execute("SELECT count(*) FROM nation")
    with serving(ServeOptions(port=port, init=options.init)) as second:
        with connect(second) as again, again.cursor() as cursor:  # a new connection: a new session
            cursor.execute("SELECT count(*) FROM nation")
            assert cursor.fetchall() == [(25,)]
        _eventually(lambda: _answers(conn))  # the old one too, once gRPC has dialled again
    conn.close()


def _answers(conn) -> bool:
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM nation")
            return cursor.fetchall() == [(25,)]
    except Exception as exc:
        assert "Unavailable" in str(exc), exc
        return False


def test_tls_serves_clients_that_trust_its_certificate(tmp_path):
    cert, key = self_signed_pair(str(tmp_path))
    with open(cert, "rb") as c, open(key, "rb") as k:
        tls = (c.read(), k.read())
    with serving(ServeOptions(tls=tls)) as server:
        assert server.location.startswith("grpc+tls://")
        with open(cert) as root:
            trusted = {"adbc.flight.sql.client_option.tls_root_certs": root.read()}
        with connect(server, **trusted) as conn, conn.cursor() as cursor:
            cursor.execute("SELECT 'over tls' AS how")
            assert cursor.fetchall() == [("over tls",)]
        with pytest.raises(Exception, match="(?i)certificate|handshake|UNAVAILABLE"):
            with connect(server) as conn, conn.cursor() as cursor:
                cursor.execute("SELECT 1")


def test_the_serve_command_serves_until_sigterm(tmp_path, tpch_sf001):
    init = tmp_path / "init.sql"
    init.write_text(";\n".join(tpch_statements(tpch_sf001)) + ";\nSET distributed.bytes_per_partition = 1;\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "datafusion_distributed", "serve", "--port", "0", "--init", str(init)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DATAFUSION_DISTRIBUTED_SERVE_TOKEN": "from-env"},
    )
    try:
        line = process.stderr.readline()
        assert line.startswith("serving Flight SQL at grpc+tcp://127.0.0.1:"), line
        location = line.split(" at ", 1)[1].strip()
        import adbc_driver_flightsql.dbapi as flight_sql

        options = {"adbc.flight.sql.authorization_header": "Bearer from-env"}
        with (
            flight_sql.connect(location, db_kwargs=options, autocommit=True) as conn,
            conn.cursor() as cursor,
        ):
            cursor.execute("SELECT count(*) FROM lineitem")
            assert cursor.fetchall() == [(60175,)]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()


def test_idle_sessions_are_closed_but_not_one_reading_a_result():
    with serving(ServeOptions(session_idle_seconds=0.5)) as server:
        with connect(server) as reading, connect(server) as idle:
            with idle.cursor() as cursor:
                cursor.execute("CREATE VIEW v AS SELECT 1 AS one")
            with reading.cursor() as cursor:
                cursor.execute(ENDLESS)
                cursor.fetchone()
                (quiet,) = [c for c in server.sessions.contexts() if c.ctx.table_exist("v")]
                time.sleep(1.0)
                with connect(server) as third, third.cursor() as other:  # a call looks for idle sessions
                    other.execute("SELECT 2")
                    assert other.fetchall() == [(2,)]
                assert len(server.sessions) == 2  # the reading one and the third; the idle one closed
                assert quiet.closed


def test_bad_init_statements_stop_the_server_from_starting():
    with pytest.raises(fl.FlightServerError, match="init statements failed.*no_such_table"):
        FlightSqlServer(options=ServeOptions(init=["CREATE VIEW v AS SELECT * FROM no_such_table"]))


def test_a_ticket_left_unread_is_forgotten():
    from datafusion_distributed.flight_sql.sessions import Statements

    statements = Statements(unread_seconds=0.2)
    left = statements.add(pa.table({"a": [1]}))
    time.sleep(0.3)
    statements.add(pa.table({"a": [2]}))  # adding looks for tickets left unread
    assert left not in statements.pending and len(statements.pending) == 1
    with pytest.raises(KeyError, match="left unread too long"):
        statements.take(left)
