"""Repair generate_series and range nodes whose empty projection DataFusion's codec drops.

DataFusion 55 serialises the LazyMemoryExec of `generate_series` or `range` as a
GenerateSeriesNode: its output schema, batch size and arguments, but not its projection. When
every column is projected away (`count(*)` over a series), the node is written with a schema
of no columns; rebuilt from those bytes, the generator still makes batches of its one `value`
column, and DataFusion fails with "number of columns(1) must match number of fields(0)".

The repair writes the generator with the schema it really produces, under a ProjectionExec of
no columns: DataFusion keeps each batch's row count through such a projection, so the node's
parent sees exactly the rows, and the (empty) schema, of the plan that was serialised.
"""

from __future__ import annotations

from . import fields as F
from .wire import LEN, WireError, encode_len_field, encode_varint_field, iter_fields

VALUE_COLUMN = b"value"  # the one column DataFusion's series functions produce


def _value_type(kind: int, args: bytes) -> bytes | None:
    """The ArrowType of the `value` column for arguments of oneof field `kind`, or None for
    arguments that produce no rows (a NULL argument) or are unknown."""
    if kind == F.GENERATE_SERIES_INT64_ARGS:
        return encode_len_field(F.ARROW_TYPE_INT64, b"")
    if kind in (F.GENERATE_SERIES_TIMESTAMP_ARGS, F.GENERATE_SERIES_DATE_ARGS):
        # Dates are generated as timestamps too; only timestamp arguments carry a time zone.
        timestamp = encode_varint_field(F.TIMESTAMP_TIME_UNIT, F.TIME_UNIT_NANOSECOND)
        if kind == F.GENERATE_SERIES_TIMESTAMP_ARGS:
            zones = [f for f in iter_fields(args) if f.number == F.TIMESTAMP_ARGS_TZ and f.wire_type == LEN]
            if zones:
                timestamp += encode_len_field(F.TIMESTAMP_TIMEZONE, zones[-1].payload(args))
        return encode_len_field(F.ARROW_TYPE_TIMESTAMP, timestamp)
    return None


def series_schema(kind: int, args: bytes) -> bytes | None:
    """The serialised schema a series generator produces for arguments of oneof field `kind`
    (`args` their payload), or None when there is nothing to repair."""
    value_type = _value_type(kind, args)
    if value_type is None:
        return None
    column = encode_len_field(F.FIELD_NAME, VALUE_COLUMN) + encode_len_field(F.FIELD_ARROW_TYPE, value_type)
    return encode_len_field(F.SCHEMA_COLUMNS, column)  # not nullable: the default, left out


def repaired_series(node: bytes) -> bytes | None:
    """`node` rewritten as described in the module docstring when it is a series generator
    whose schema lost every column, else None (the node serialises faithfully)."""
    try:
        top = list(iter_fields(node))
        if len(top) != 1 or top[0].number != F.GENERATE_SERIES or top[0].wire_type != LEN:
            return None
        body = top[0].payload(node)
        parts = list(iter_fields(body))
    except WireError:  # not a node we can read, so not one we repair
        return None
    schemas = [f for f in parts if f.number == F.GENERATE_SERIES_SCHEMA and f.wire_type == LEN]
    if len(schemas) != 1 or any(f.number == F.SCHEMA_COLUMNS for f in iter_fields(schemas[0].payload(body))):
        return None  # a projected column is the generator's own: its schema is right
    args = [f for f in parts if f.number != F.GENERATE_SERIES_SCHEMA and f.wire_type == LEN]
    schema = next((s for f in args if (s := series_schema(f.number, f.payload(body))) is not None), None)
    if schema is None:
        return None
    fixed = b"".join(
        encode_len_field(F.GENERATE_SERIES_SCHEMA, schema) if f is schemas[0] else body[f.start : f.end]
        for f in parts
    )
    generator = encode_len_field(F.GENERATE_SERIES, fixed)
    return encode_len_field(F.PROJECTION, encode_len_field(F.PROJECTION_INPUT, generator))
