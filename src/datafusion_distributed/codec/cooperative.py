"""Wrapping subtrees of a serialised plan in DataFusion's CooperativeExec.

A CooperativeExec passes its child's batches through unchanged, but spends the tokio task's
budget on each: after so many batches in one poll, the task yields to the scheduler. Work
that never yields (a join emitting millions of rows into an aggregation in one poll) cannot
be aborted; wrapped, it can, at its next yield.
"""

from __future__ import annotations

from collections.abc import Iterable

from .fields import COOPERATIVE, COOPERATIVE_INPUT
from .wire import LEN, WireError, encode_len_field, iter_fields

Span = tuple[int, int]  # [start, end) in the plan's bytes


def cooperative(subtree: bytes) -> bytes:
    """The bytes of a CooperativeExec over the plan `subtree`."""
    return encode_len_field(COOPERATIVE, encode_len_field(COOPERATIVE_INPUT, subtree))


def wrap_cooperative(plan: bytes, subtrees: Iterable[bytes]) -> bytes:
    """`plan` with every copy of each of `subtrees` (the plan itself included) wrapped in a
    CooperativeExec, nested copies too.

    A copy is a field whose whole payload is the subtree, as for `replace_subtree`. The plan is
    rebuilt in one pass that descends only into fields holding a copy."""
    spans: set[Span] = set()
    for subtree in set(subtrees):
        pos = plan.find(subtree)
        while pos != -1:  # candidates: a match inside other bytes is never a field's payload
            spans.add((pos, pos + len(subtree)))
            pos = plan.find(subtree, pos + 1)
    inside = _wrapped_within(plan, 0, spans - {(0, len(plan))})
    return cooperative(inside) if (0, len(plan)) in spans else inside


def _wrapped_within(message: bytes, base: int, spans: set[Span]) -> bytes:
    """`message` (at offset `base` of the plan) with each field whose payload is at one of
    `spans` wrapped, at any depth; payloads that are not messages are left as they are."""
    if not spans:
        return message
    pieces: list[bytes] = []
    last = 0
    try:
        fields = list(iter_fields(message))
    except WireError:
        return message
    for field in fields:
        start, end = base + field.payload_start, base + field.end
        within = {s for s in spans if start <= s[0] and s[1] <= end}
        if field.wire_type != LEN or not within:
            continue
        payload = message[field.payload_start : field.end]
        new = _wrapped_within(payload, start, within - {(start, end)})
        if (start, end) in within:
            new = cooperative(new)
        if new is not payload:
            pieces += [message[last : field.start], encode_len_field(field.number, new)]
            last = field.end
    return b"".join([*pieces, message[last:]]) if pieces else message
