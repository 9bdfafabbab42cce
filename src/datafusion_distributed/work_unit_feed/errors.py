"""The errors of a work-unit feed: its provider failed, or reading one of its units did."""

from __future__ import annotations


class FeedError(RuntimeError):
    """A feed could not give a query its rows: `source` is "provider" (listing units failed)
    or "reader" (reading the unit `unit`, shown by its repr, failed); `feed` is its name."""

    def __init__(self, feed: str, source: str, unit: str | None, detail: str) -> None:
        where = (
            f"reading unit {unit}" if source == "reader" else f"its provider ({unit or 'before any unit'})"
        )
        super().__init__(f"feed {feed!r}: {where} failed: {detail}")
        self.feed = feed
        self.source = source
        self.unit = unit
        self.detail = detail


class FeedUnavailable(RuntimeError):
    """A task could not ask the coordinator for units (it stopped answering, or the query
    ended): the task fails, and the coordinator, if it still runs the query, retries it."""


def short_repr(value: object, limit: int = 120) -> str:
    """`repr(value)` cut to `limit` characters, to name a unit in a message."""
    try:
        text = repr(value)
    except Exception as exc:  # a unit's own __repr__ may fail: name it by its type
        text = f"<{type(value).__name__} ({type(exc).__name__} in its repr)>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
