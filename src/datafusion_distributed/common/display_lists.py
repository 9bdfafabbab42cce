"""Read the bracketed lists of a plan node's display line (`expr=[...]`, `projection=[...]`)."""

from __future__ import annotations


def bracketed_list(line: str, opener: str) -> list[str] | None:
    """The top-level comma-separated items of the list that `opener` (ending in `[`) starts in
    `line`: `bracketed_list("P: expr=[a@0 as a, f(b@1, 2) as c]", "expr=[")` is
    `["a@0 as a", "f(b@1, 2) as c"]`. None when `line` has no such list, or it is not closed
    (the line was cut)."""
    start = line.find(opener)
    if start < 0:
        return None
    items, depth, begin = [], 0, start + len(opener)
    for position in range(begin, len(line)):
        char = line[position]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                items.append(line[begin:position].strip())
                return [item for item in items if item]
            depth -= 1
        elif char == "," and depth == 0:
            items.append(line[begin:position].strip())
            begin = position + 1
    return None
