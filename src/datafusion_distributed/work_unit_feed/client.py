"""A task's side of the feed service: asking the coordinator for units (see `server`)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from ..common.errors import server_message
from .dispatch import Unit
from .errors import FeedUnavailable


class RemoteUnits:
    """The units of one feed scan for one task attempt, asked of the coordinator's feed
    service at `url`. `connect_options` are `flight.connect`'s keyword arguments (the
    cluster's token); `timeout` bounds each call (a unit may wait for the provider), and
    `connect_timeout` the first answer of the service (one that cannot be reached fails the
    task then, not when a unit's wait would have ended)."""

    def __init__(
        self,
        url: str,
        query_id: str,
        token: str,
        scan_id: int,
        connect_options: dict[str, Any] | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 30.0,
    ) -> None:
        self.url = url
        self._request = {"query_id": query_id, "token": token, "scan": scan_id}
        self._connect_options = connect_options or {}
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._client: flight.FlightClient | None = None
        self._lock = threading.Lock()

    def _connected(self) -> flight.FlightClient:
        with self._lock:
            if self._client is None:
                client = flight.connect(self.url, **self._connect_options)
                try:  # a cheap call, to find an unreachable service within `connect_timeout`
                    client.list_actions(flight.FlightCallOptions(timeout=self._connect_timeout))
                except (flight.FlightError, pa.ArrowException, OSError) as exc:
                    client.close()
                    raise FeedUnavailable(
                        f"the coordinator's feed service at {self.url} did not answer within "
                        f"{self._connect_timeout:g} s (the workers must reach DistributedConfig.feed_host): "
                        f"{server_message(exc)}"
                    ) from exc
                self._client = client
            return self._client

    def _call(self, name: str, body: dict) -> list[bytes]:
        client = self._connected()
        options = flight.FlightCallOptions(timeout=self._timeout)
        try:
            results = client.do_action(flight.Action(name, json.dumps(body).encode()), options)
            return [result.body.to_pybytes() for result in results]
        except (flight.FlightError, pa.ArrowException, OSError) as exc:
            raise FeedUnavailable(
                f"asking the coordinator ({self.url}) for units failed: {server_message(exc)}"
            ) from exc

    def next_unit(self) -> Unit | None:
        """The next unit for this attempt, or None when there is none left.

        Raises:
            FeedUnavailable: the coordinator refused (its provider failed, the attempt was
                given up on, the query ended) or could not be reached.
        """
        answer = self._call("next_unit", self._request)
        if not answer:
            return None
        return Unit(int(answer[0]), answer[1])

    def unit_failed(self, index: int, detail: str) -> None:
        """Tell the coordinator a unit's reader failed; the task fails anyway if it cannot."""
        try:
            self._call("unit_failed", {**self._request, "index": index, "detail": detail})
        except FeedUnavailable:
            pass

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
