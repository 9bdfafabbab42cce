"""Checks of decoded JSON values, shared by the decoders of the protocol and of task metrics.

Each decoder raises its own error type (a `ProtocolError`, a `MetricsError`), so the checks
are bound to the error they raise; the messages name the field that failed.
"""

from __future__ import annotations

from typing import Any


class Checks:
    """Validators that raise `error(message)` when a value is not what a field needs."""

    def __init__(self, error: type[Exception]) -> None:
        self.error = error

    def check(self, condition: bool, message: str) -> None:
        """Raise the error with `message` unless `condition` holds."""
        if not condition:
            raise self.error(message)

    def integer(
        self, value: Any, name: str, low: int = 0, high: int = 1 << 40, *, range_in_message: bool = True
    ) -> int:
        """`value` if it is an integer (not a bool) in [`low`, `high`]; the out-of-range message
        shows the value and the bounds unless `range_in_message` is False."""
        self.check(isinstance(value, int) and not isinstance(value, bool), f"{name} must be an integer")
        if range_in_message:
            self.check(low <= value <= high, f"{name}={value} is out of range [{low}, {high}]")
        else:
            self.check(low <= value <= high, f"{name} is out of range")
        return value

    def string(self, value: Any, name: str, limit: int = 4096) -> str:
        """`value` if it is a string of at most `limit` characters."""
        self.check(
            isinstance(value, str) and len(value) <= limit, f"{name} must be a string of at most {limit}"
        )
        return value
