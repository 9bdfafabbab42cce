"""A wrong token or a dead worker is told before the first query runs, or, for workers a
resolver finds, at the first query kept on the coordinator.

Queries of one task run in the coordinator and call no worker, so without a check a bad
worker would be found only by the first query large enough to be distributed. Workers given as
URLs are asked for their health before the context's first query runs (planning alone calls
none): one that does not answer is an error naming it, or, with `check_workers="warn"`, a
warning. Workers of a resolver are asked in the background by the first query that stays on
the coordinator; each failure is one warning naming the worker, the cause and what to do.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, StaticResolver, WorkersUnavailable
from datafusion_distributed.worker.flight_worker import FlightWorker

SMALL = "SELECT count(*) AS n FROM generate_series(1, 1000)"
LOGGER = "datafusion_distributed"


@pytest.fixture
def worker(tmp_path) -> Iterator[FlightWorker]:
    started = FlightWorker(str(tmp_path / "spool"), auth_token="the-right-token")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A port that takes connections and never answers them (a frozen worker)."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        yield f"grpc://127.0.0.1:{listening.getsockname()[1]}"


def closed_url() -> str:
    """A port nothing listens on (a dead worker)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"grpc://127.0.0.1:{s.getsockname()[1]}"


def warnings_naming(caplog, url: str, within: float = 10.0) -> list[str]:
    """The warnings that name `url`, waiting up to `within` seconds for the first."""
    deadline = time.monotonic() + within
    while True:
        found = [
            r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and url in r.getMessage()
        ]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_wrong_token_is_told_at_the_first_query_on_the_coordinator(worker, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    config = DistributedConfig(auth_token="a-wrong-token", connect_timeout=5)
    with DistributedContext(SessionContext(), workers=StaticResolver([worker.url]), config=config) as dctx:
        assert dctx.sql(SMALL).to_pylist() == [{"n": 1000}]  # runs in the coordinator
        found = warnings_naming(caplog, worker.url)
        assert len(found) == 1, found
        assert "refused the token" in found[0] and "auth_token" in found[0]
        assert dctx.sql(SMALL).to_pylist() == [{"n": 1000}]
        time.sleep(0.2)
        assert len(warnings_naming(caplog, worker.url, within=0)) == 1  # once, not per query


def test_a_dead_worker_is_told_and_a_live_one_is_not(worker, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    dead = closed_url()
    config = DistributedConfig(auth_token="the-right-token", connect_timeout=5)
    with DistributedContext(
        SessionContext(), workers=StaticResolver([worker.url, dead]), config=config
    ) as dctx:
        assert dctx.sql(SMALL).to_pylist() == [{"n": 1000}]
        found = warnings_naming(caplog, dead)
        assert len(found) == 1 and "unreachable" in found[0], found
        time.sleep(0.5)
        assert not warnings_naming(caplog, worker.url, within=0)


def test_a_silent_worker_does_not_hold_the_query(silent_url, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    config = DistributedConfig(auth_token="t", connect_timeout=2)
    with DistributedContext(SessionContext(), workers=StaticResolver([silent_url]), config=config) as dctx:
        started = time.monotonic()
        assert dctx.sql(SMALL).to_pylist() == [{"n": 1000}]
        assert time.monotonic() - started < 1.5  # the check waits for the worker, not the query
        found = warnings_naming(caplog, silent_url, within=15)
        assert len(found) == 1 and "did not answer" in found[0], found


def test_a_cluster_the_library_started_is_not_checked(caplog, monkeypatch):
    from datafusion_distributed.protocol.flight import WorkerClient

    calls: list[str] = []
    monkeypatch.setattr(WorkerClient, "health", lambda self: calls.append(self.url) or {})
    with DistributedContext(SessionContext()) as dctx:  # the embedded cluster
        assert dctx.sql(SMALL).to_pylist() == [{"n": 1000}]
        time.sleep(0.2)
    assert calls == []


# -- workers given as URLs: checked before the first query runs ---------------------------


def test_dead_urls_fail_the_first_query_naming_each(worker):
    """Once, a typo'd URL made small queries run in the coordinator, with a log line only."""
    dead = closed_url()
    config = DistributedConfig(auth_token="the-right-token", connect_timeout=5)
    with DistributedContext(SessionContext(), workers=[worker.url, dead], config=config) as dctx:
        assert "Stage 0" in dctx.sql(SMALL).explain_string()  # planning calls no worker
        with pytest.raises(WorkersUnavailable) as raised:
            dctx.sql(SMALL).to_pylist()
        assert list(raised.value.failures) == [dead]
        message = str(raised.value)
        assert message.startswith("1 of 2 worker(s) given did not answer before the first query")
        assert f"{dead}: it is unreachable: check that it runs and that its URL is right" in message
        assert "check_workers='warn'" in message
        with pytest.raises(WorkersUnavailable):  # asked again: it may have been started since
            dctx.sql(SMALL).to_pylist()


def test_a_wrong_token_is_an_error_saying_what_to_set(worker):
    config = DistributedConfig(auth_token="a-wrong-token", connect_timeout=5)
    with DistributedContext(SessionContext(), workers=[worker.url], config=config) as dctx:
        with pytest.raises(
            WorkersUnavailable, match=r"it refused the token: set DistributedConfig.auth_token"
        ):
            dctx.sql(SMALL).to_pylist()


def test_a_silent_worker_fails_the_first_query_within_the_connect_timeout(silent_url):
    with DistributedContext(
        SessionContext(), workers=[silent_url], config=DistributedConfig(connect_timeout=1)
    ) as dctx:
        started = time.monotonic()
        with pytest.raises(WorkersUnavailable, match="did not answer"):
            dctx.sql(SMALL).to_pylist()
        assert time.monotonic() - started < 5


def test_a_degraded_start_is_a_warning_when_asked_for(worker, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    dead = closed_url()
    config = DistributedConfig(auth_token="the-right-token", connect_timeout=5, check_workers="warn")
    with DistributedContext(SessionContext(), workers=[worker.url, dead], config=config) as dctx:
        assert dctx.sql(SMALL).to_pylist() == [{"n": 1000}]
        found = warnings_naming(caplog, dead, within=0)
        assert len(found) == 2 and "did not answer" in found[0] and "quarantined" in found[1], found
        assert dctx.engine.liveness.quarantine.marked() == {dead}  # later queries avoid it
        assert dctx.sql(SMALL).to_pylist() == [{"n": 1000}]
        time.sleep(0.2)
        assert len(warnings_naming(caplog, dead, within=0)) == 2  # once, not per query


def test_turned_off_only_the_background_check_of_the_first_query_warns(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    dead = closed_url()
    with DistributedContext(
        SessionContext(), workers=[dead], config=DistributedConfig(check_workers="off")
    ) as dctx:
        assert dctx.sql(SMALL).to_pylist() == [{"n": 1000}]  # runs in the coordinator
        found = warnings_naming(caplog, dead)
        assert len(found) == 1 and found[0].startswith("health check failed"), found
