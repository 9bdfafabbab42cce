"""Protobuf wire format, read and written without a schema.

Plan bytes are edited as nested length-delimited fields: enough to find, cut and splice
subtrees and to rewrite the few fields we own, without copying DataFusion's schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

VARINT = 0
I64 = 1
LEN = 2
I32 = 5


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


class Field(NamedTuple):
    """One field of a message: where its key starts, where its payload lies.

    A named tuple: plans are walked field by field in Python, and tuples are cheap to make."""

    number: int
    wire_type: int
    start: int  # offset of the key
    payload_start: int
    end: int
    value: int = 0  # the integer of a VARINT field

    def payload(self, buf: bytes) -> bytes:
        """The field's payload bytes, cut from the message `buf` it was read from."""
        return buf[self.payload_start : self.end]


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read a varint at `pos`; return (value, position after it)."""
    if pos < len(buf) and buf[pos] < 0x80:  # one byte: most keys and small lengths
        return buf[pos], pos + 1
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def encode_varint(value: int) -> bytes:
    """Encode `value` as a varint; negative values take ten bytes, as protobuf's int64 does."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def iter_fields(buf: bytes | memoryview) -> Iterator[Field]:
    """Yield the top-level fields of a message; raise WireError if it is malformed."""
    pos = 0
    n = len(buf)
    while pos < n:
        start = pos
        key, pos = decode_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        value = 0
        if wire_type == VARINT:
            value, pos = decode_varint(buf, pos)
            payload_start = pos
        elif wire_type == I64:
            payload_start, pos = pos, pos + 8
        elif wire_type == I32:
            payload_start, pos = pos, pos + 4
        elif wire_type == LEN:
            length, payload_start = decode_varint(buf, pos)
            pos = payload_start + length
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        if pos > n:
            raise WireError("field runs past the end of the message")
        yield Field(number, wire_type, start, payload_start, pos, value)


def parse_fields(buf: bytes) -> list[Field]:
    """The top-level fields of a message, as a list; raise WireError if it is malformed."""
    return list(iter_fields(buf))


def encode_key(number: int, wire_type: int) -> bytes:
    """The key that starts field `number` of `wire_type`."""
    return encode_varint((number << 3) | wire_type)


def encode_len_field(number: int, payload: bytes) -> bytes:
    """A whole length-delimited field: key, length prefix, payload."""
    return encode_key(number, LEN) + encode_varint(len(payload)) + payload


def encode_varint_field(number: int, value: int) -> bytes:
    """A whole varint field: key and value."""
    return encode_key(number, VARINT) + encode_varint(value)


def only_field(buf: bytes, number: int) -> Field:
    """The single LEN field `number` of a message (e.g. the oneof of a plan node)."""
    matches = [f for f in iter_fields(buf) if f.number == number]
    if len(matches) != 1:
        raise WireError(f"expected one field {number}, found {len(matches)}")
    return matches[0]


def replace_field_payload(buf: bytes, field: Field, payload: bytes) -> bytes:
    """Swap the payload of a LEN field, re-encoding its length prefix."""
    if field.wire_type != LEN:
        raise WireError(f"field {field.number} is not length-delimited")
    return buf[: field.start] + encode_len_field(field.number, payload) + buf[field.end :]
