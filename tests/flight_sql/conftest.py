"""A Flight SQL server over an embedded cluster, started in the test's process, and clients of
it made with the ADBC Flight SQL driver from PyPI."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from datafusion_distributed.flight_sql import FlightSqlServer, ServeOptions
from datafusion_distributed.test_utils.forced import FORCED_CONFIG
from datafusion_distributed.test_utils.tpch import TPCH_TABLES

flight_sql = pytest.importorskip("adbc_driver_flightsql.dbapi")


def tpch_statements(path: Path) -> list[str]:
    """CREATE EXTERNAL TABLE statements of the TPC-H tables at `path`."""
    return [
        f"CREATE EXTERNAL TABLE {table} STORED AS PARQUET LOCATION '{path / table}/'" for table in TPCH_TABLES
    ]


@contextmanager
def serving(options: ServeOptions, workers: Any = None) -> Iterator[FlightSqlServer]:
    """A server with `options` (distribution forced on small data), serving in a thread."""
    server = FlightSqlServer(workers, FORCED_CONFIG, options)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(timeout=30)


def connect(server: FlightSqlServer, token: str | None = None, **options: str) -> Any:
    """An ADBC connection to `server` (autocommit: the server has no transactions)."""
    if token is not None:
        options["adbc.flight.sql.authorization_header"] = f"Bearer {token}"
    return flight_sql.connect(server.location, db_kwargs=options, autocommit=True)


@pytest.fixture(scope="module")
def tpch_server(tpch_sf001) -> Iterator[FlightSqlServer]:
    """A server whose sessions see TPC-H at SF 0.01."""
    with serving(ServeOptions(init=tpch_statements(tpch_sf001))) as server:
        yield server
