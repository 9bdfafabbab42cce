"""Properties that report a total over the parts an object holds (a stage's tasks, a file's records)."""

from __future__ import annotations

from typing import Any


def total_of(parts: str, field: str, doc: str) -> property:
    """A read-only property: `field` summed over the objects in the attribute named `parts`.

    `doc` becomes the property's docstring, e.g.
    ``rows = total_of("tasks", "rows", "Rows the stage's tasks wrote.")``."""

    def total(self: Any) -> float:
        return sum(getattr(part, field) for part in getattr(self, parts))

    total.__doc__ = doc
    return property(total)
