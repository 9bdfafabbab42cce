"""The schema-less protobuf wire reader and writer, on hand-made messages and real plan bytes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext
from hypothesis import given
from hypothesis import strategies as st

from datafusion_distributed.codec.wire import (
    I32,
    I64,
    LEN,
    VARINT,
    WireError,
    decode_varint,
    encode_key,
    encode_len_field,
    encode_varint,
    encode_varint_field,
    iter_fields,
    only_field,
    parse_fields,
    replace_field_payload,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**63 - 1, b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f"),
        (-1, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"),  # two's complement, 10 bytes
    ],
)
def test_varint_known_encodings(value, encoded):
    assert encode_varint(value) == encoded
    decoded, end = decode_varint(encoded, 0)
    assert end == len(encoded)
    assert decoded == (value if value >= 0 else value + 2**64)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_round_trip(value):
    encoded = encode_varint(value)
    assert decode_varint(b"junk" + encoded, 4) == (value, 4 + len(encoded))


def test_decode_varint_errors():
    with pytest.raises(WireError, match="truncated"):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(WireError, match="longer than 10 bytes"):
        decode_varint(b"\xff" * 11 + b"\x01", 0)


def test_iter_fields_reads_every_wire_type():
    msg = (
        encode_varint_field(1, 150)
        + encode_key(2, I64)
        + (7).to_bytes(8, "little")
        + encode_len_field(3, b"hello")
        + encode_key(4, I32)
        + (9).to_bytes(4, "little")
        + encode_len_field(2000, b"")
    )
    fields = parse_fields(msg)
    assert [(f.number, f.wire_type) for f in fields] == [
        (1, VARINT),
        (2, I64),
        (3, LEN),
        (4, I32),
        (2000, LEN),
    ]
    assert fields[0].value == 150
    assert int.from_bytes(fields[1].payload(msg), "little") == 7
    assert fields[2].payload(msg) == b"hello"
    assert int.from_bytes(fields[3].payload(msg), "little") == 9
    assert fields[4].payload(msg) == b""
    # Offsets tile the message: every byte belongs to exactly one field.
    assert fields[0].start == 0 and fields[-1].end == len(msg)
    assert all(a.end == b.start for a, b in zip(fields, fields[1:], strict=False))


@pytest.mark.parametrize(
    ("buf", "message"),
    [
        (encode_key(1, LEN) + encode_varint(10) + b"short", "past the end"),
        (encode_key(1, I64) + b"\x00\x00", "past the end"),
        (encode_key(1, I32) + b"\x00", "past the end"),
        (b"\x00\x01", "field number 0"),
        (encode_key(1, 3) + b"\x00", "unsupported wire type 3"),  # start group
        (encode_key(1, 4), "unsupported wire type 4"),  # end group
        (encode_key(1, VARINT), "truncated varint"),
    ],
)
def test_malformed_messages_raise(buf, message):
    with pytest.raises(WireError, match=message):
        list(iter_fields(buf))


def test_wire_error_is_a_value_error():
    assert issubclass(WireError, ValueError)


def test_only_field_and_replace_field_payload():
    msg = encode_varint_field(1, 5) + encode_len_field(2, b"a" * 200) + encode_len_field(3, b"tail")
    field = only_field(msg, 2)
    assert field.payload(msg) == b"a" * 200
    replaced = replace_field_payload(msg, field, b"b")
    assert [(f.number, f.payload(replaced)) for f in iter_fields(replaced)][1:] == [(2, b"b"), (3, b"tail")]
    with pytest.raises(WireError, match="expected one field 9, found 0"):
        only_field(msg, 9)
    with pytest.raises(WireError, match="expected one field 2, found 2"):
        only_field(msg + encode_len_field(2, b""), 2)
    with pytest.raises(WireError, match="not length-delimited"):
        replace_field_payload(msg, only_field(msg, 1), b"x")


def _reencode(buf: bytes) -> bytes:
    """Rebuild a message from its parsed fields, descending into every payload that parses."""
    out = b""
    for field in iter_fields(buf):
        raw = buf[field.start : field.end]
        if field.wire_type == LEN:
            payload = field.payload(buf)
            try:
                inner = _reencode(payload)
            except WireError:
                inner = payload
            raw = encode_len_field(field.number, inner)
        out += raw
    return out


def test_real_plan_bytes_parse_and_reencode_identically(tmp_path):
    """DataFusion encodes minimally, so re-encoding what we parse gives the same bytes."""
    pq.write_table(
        pa.table({"k": list(range(100)), "v": [str(i) for i in range(100)]}), tmp_path / "t.parquet"
    )
    ctx = SessionContext(SessionConfig().with_target_partitions(3))
    ctx.register_parquet("t", str(tmp_path / "t.parquet"))
    sql = "SELECT v, count(*) FROM t WHERE k > 3 GROUP BY v ORDER BY 2 DESC, 1 LIMIT 5"
    raw = ctx.sql(sql).execution_plan().to_bytes()
    assert _reencode(raw) == raw


nested = st.recursive(
    st.binary(max_size=20),
    lambda children: st.lists(
        st.tuples(st.integers(1, 5000), children).map(lambda t: encode_len_field(*t))
        | st.tuples(st.integers(1, 5000), st.integers(0, 2**64 - 1)).map(lambda t: encode_varint_field(*t)),
        max_size=5,
    ).map(b"".join),
    max_leaves=20,
)


@given(st.lists(st.tuples(st.integers(1, 2**29 - 1), nested), max_size=6))
def test_length_delimited_fields_round_trip(fields):
    msg = b"".join(encode_len_field(number, payload) for number, payload in fields)
    parsed = list(iter_fields(msg))
    assert [(f.number, f.wire_type, f.payload(msg)) for f in parsed] == [(n, LEN, p) for n, p in fields]
