"""The coordinator's feed service: a small Arrow Flight server workers ask for units.

Why a server on the coordinator rather than units pushed to tasks: a task asks only when it
has read its last unit, so the pace of each task is its own (a slow unit or worker holds back
no one else) with no queue to size per task, and the coordinator stays a plain client of its
workers for everything else. The service listens where `DistributedConfig.feed_host` says
(loopback by default, right for embedded and local clusters), and checks the cluster's token
on every call, as workers do.

Actions (JSON bodies): `next_unit` {query_id, token, scan} answers nothing when the attempt's
units are over, else two results: the unit's number and its pickled value; `unit_failed`
{query_id, token, scan, index, detail} records a reader's failure for the query's error.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

import pyarrow.flight as flight

from .dispatch import AttemptAbandoned, FeedRun
from .errors import FeedError

MAX_BODY_BYTES = 64 * 1024


class FeedServer(flight.FlightServerBase):
    """Serves the units of the feed runs added to it (one per running query reading a feed).

    Args:
        host: the address to listen on, which workers must reach.
        middleware: Flight server middleware (the cluster's token check), by name.
    """

    def __init__(self, host: str = "127.0.0.1", middleware: dict[str, Any] | None = None) -> None:
        super().__init__(f"grpc://{host}:0", middleware=middleware)
        self.url = f"grpc://{host}:{self.port}"
        self._runs: dict[str, FeedRun] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve, name="feed-server", daemon=True)
        self._thread.start()

    def add(self, run: FeedRun) -> None:
        """Serve the units of `run` (under its query id)."""
        with self._lock:
            self._runs[run.query_id] = run

    def remove(self, query_id: str) -> None:
        """Stop serving a query's units: its tasks' later requests are refused."""
        with self._lock:
            self._runs.pop(query_id, None)

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        """The actions `do_action` answers."""
        return [
            ("next_unit", "The next work unit of a feed scan for a task attempt"),
            ("unit_failed", "A task's reader failed on a unit"),
        ]

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterable[flight.Result]:
        """Answer `next_unit` or `unit_failed` (see the module's docstring)."""
        body = action.body.to_pybytes() if action.body is not None else b""
        try:
            request = _request(body)
            with self._lock:
                run = self._runs.get(request["query_id"])
            if run is None:
                raise AttemptAbandoned(f"query {request['query_id']} is not running here")
            if action.type == "next_unit":
                unit = run.take(request["token"], request["scan"])
                if unit is None:
                    return []
                return [flight.Result(str(unit.index).encode()), flight.Result(unit.payload)]
            if action.type == "unit_failed":
                index, detail = request.get("index"), request.get("detail")
                if not isinstance(index, int) or not isinstance(detail, str):
                    raise ValueError("unit_failed needs an integer index and a text detail")
                run.unit_failed(request["token"], request["scan"], index, detail[:4096])
                return []
        except (AttemptAbandoned, FeedError, ValueError) as exc:
            raise flight.FlightServerError(str(exc)) from exc
        raise flight.FlightServerError(f"unknown action {action.type!r}")

    def close(self) -> None:
        """Stop serving."""
        self.shutdown()
        self._thread.join(timeout=10)


def _request(body: bytes) -> dict:
    if len(body) > MAX_BODY_BYTES:
        raise ValueError("request too large")
    try:
        request = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"request is not valid JSON: {exc}") from exc
    if not (
        isinstance(request, dict)
        and isinstance(request.get("query_id"), str)
        and isinstance(request.get("token"), str)
        and isinstance(request.get("scan"), int)
    ):
        raise ValueError("a request names query_id, token (text) and scan (an integer)")
    return request
