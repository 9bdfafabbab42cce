"""Replace a subtree of a serialised plan by another serialised plan.

A child's `to_bytes()` appears verbatim inside its parent's bytes as the payload of a
length-delimited field. Replacing it means swapping that payload and re-encoding the length
prefix of every enclosing field, from the root down. Identical subtrees (a self-join) occur
more than once; the caller picks one by its occurrence, counted in byte order, which is the
order of a depth-first walk of the plan's children.
"""

from __future__ import annotations

from .wire import LEN, WireError, encode_len_field, iter_fields


class SpliceError(ValueError):
    """The subtree to replace is not a field of the plan."""


def _enclosing_path(buf: bytes, start: int, end: int) -> list | None:
    """The chain of LEN fields whose innermost payload is exactly buf[start:end], or None."""
    try:
        fields = list(iter_fields(buf))
    except WireError:
        return None
    for field in fields:
        if field.wire_type != LEN or not (field.payload_start <= start and end <= field.end):
            continue
        if field.payload_start == start and field.end == end:
            return [field]
        inner = _enclosing_path(
            buf[field.payload_start : field.end], start - field.payload_start, end - field.payload_start
        )
        return None if inner is None else [field, *inner]
    return None


def subtree_offsets(plan: bytes, subtree: bytes) -> list[int]:
    """Offsets where `subtree` is exactly the payload of a (nested) field of `plan`."""
    offsets = []
    pos = plan.find(subtree)
    while pos != -1:
        if _enclosing_path(plan, pos, pos + len(subtree)) is not None:
            offsets.append(pos)
            pos = plan.find(subtree, pos + len(subtree))
        else:
            pos = plan.find(subtree, pos + 1)
    return offsets


def _rebuild(buf: bytes, path: list, replacement: bytes) -> bytes:
    field, *rest = path
    payload = buf[field.payload_start : field.end]
    inner = replacement if not rest else _rebuild(payload, rest, replacement)
    return buf[: field.start] + encode_len_field(field.number, inner) + buf[field.end :]


def replace_subtree(plan: bytes, old: bytes, new: bytes, occurrence: int = 0) -> bytes:
    """Return `plan` with the `occurrence`-th copy of subtree `old` replaced by `new`.

    The plan itself counts as its own only subtree when it equals `old`.
    """
    if plan == old and occurrence == 0:
        return new
    offsets = subtree_offsets(plan, old)
    if occurrence >= len(offsets):
        raise SpliceError(f"subtree occurrence {occurrence} not found: the plan holds {len(offsets)} copies")
    start = offsets[occurrence]
    path = _enclosing_path(plan, start, start + len(old))
    assert path is not None
    return _rebuild(plan, path, new)
