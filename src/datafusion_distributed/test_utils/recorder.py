"""An event handler for tests: it keeps every lifecycle event it is told of."""

from __future__ import annotations

from ..events.handlers import Event, EventKind


class EventRecorder:
    """A handler (pass it in `handlers=[...]`) that records every event, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        """Keep `event`."""
        self.events.append(event)

    def lost(self) -> list[str]:
        """The workers reported unreachable, in the order they were reported."""
        return [e.worker or "" for e in self.events if e.kind is EventKind.WORKER_UNREACHABLE]
