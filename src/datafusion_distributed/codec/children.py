"""Where a plan node's children lie inside its bytes, so they are read, not serialised again.

A serialised PhysicalPlanNode is a oneof: one length-delimited field holding the node's own
message (ProjectionExecNode, HashJoinExecNode, ...), which holds each child PhysicalPlanNode
as a field of its own (`input`; `left` and `right`; a repeated `inputs`). Which fields those
are is learned from DataFusion itself rather than copied from its schema: a node of a kind not
seen before is compared with its children's own serialisation (`learn`), and later nodes of
that kind and arity are cut with the learned layout (`read`).
"""

from __future__ import annotations

from .wire import LEN, Field, WireError, iter_fields

Layout = tuple[int, ...]  # field numbers of the node message that hold the children, in order


def _message(raw: bytes) -> tuple[bytes, list[Field]] | None:
    """A plan node's own message (the payload of its oneof) and that message's fields."""
    try:
        top = list(iter_fields(raw))
        if len(top) != 1 or top[0].wire_type != LEN:
            return None
        body = top[0].payload(raw)
        return body, list(iter_fields(body))
    except WireError:
        return None


def node_message(raw: bytes, *kinds: int) -> bytes:
    """The payload of the plan node `raw`'s oneof (its own message); WireError unless the node
    is one of `kinds`."""
    top = list(iter_fields(raw))
    if len(top) != 1 or top[0].number not in kinds or top[0].wire_type != LEN:
        raise WireError(f"not a plan node of kind {kinds}")
    return top[0].payload(raw)


def kind(raw: bytes) -> int | None:
    """The oneof field number that says which kind of node `raw` is (None if unreadable)."""
    try:
        top = next(iter_fields(raw), None)
    except WireError:
        return None
    return top.number if top is not None and top.wire_type == LEN else None


def read(raw: bytes, layout: Layout) -> list[bytes] | None:
    """The children's bytes cut out of `raw` with `layout`; None when `raw` does not fit it
    (then the caller serialises the children instead)."""
    parsed = _message(raw)
    if parsed is None:
        return None
    body, fields = parsed
    by_number: dict[int, list[Field]] = {}
    for field in fields:
        if field.wire_type == LEN and field.number in layout:
            by_number.setdefault(field.number, []).append(field)
    if sum(len(found) for found in by_number.values()) != len(layout):
        return None  # every field of those numbers must be a child, and every child found
    used: dict[int, int] = {}
    children = []
    for number in layout:
        index = used.get(number, 0)
        used[number] = index + 1
        children.append(by_number[number][index].payload(body))
    return children


def learn(raw: bytes, children: list[bytes]) -> Layout | None:
    """The layout that finds `children` (DataFusion's serialisation of them) in `raw`, or None
    when they are not whole fields of the node's message (never read such a kind)."""
    parsed = _message(raw)
    if parsed is None:
        return None
    body, fields = parsed
    taken: set[int] = set()
    layout = []
    for child in children:
        match = next(
            (
                i
                for i, f in enumerate(fields)
                if i not in taken
                and f.wire_type == LEN
                and f.end - f.payload_start == len(child)
                and body[f.payload_start : f.end] == child
            ),
            None,
        )
        if match is None:
            return None
        taken.add(match)
        layout.append(fields[match].number)
    return tuple(layout) if read(raw, tuple(layout)) == children else None
