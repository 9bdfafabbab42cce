"""Check single-node DataFusion's outcome against the text a `.slt` file expects.

Informative only: the corpus was written against a slightly different DataFusion, and the
text format below approximates the one of DataFusion's Rust runner (NULL, true/false,
`(empty)` for an empty string, floats rounded to 12 decimals, lists as `[a, b]`, structs and
maps as `{k: v}`, binary as hex). Values compare token by token, numbers with a tolerance, so
a formatting nuance does not show up as a mismatch.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from .compare import first_line, is_explain, readable
from .engines import Outcome
from .parser import Record, RecordKind

__all__ = ["expected_mismatch", "render_rows", "render_value"]


def _shortest_float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (as Rust prints an f32)."""
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.unpack("f", struct.pack("f", candidate))[0] == value:
            return candidate
    return value


def _float_text(value: float, type_: pa.DataType) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if pa.types.is_float32(type_) or pa.types.is_float16(type_):
        value = _shortest_float32(value)
    text = f"{round(value, 12):.12f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def render_value(value: Any, type_: pa.DataType, top: bool = True) -> str:
    """`value` (from `to_pylist`, of Arrow type `type_`) as DataFusion's runner prints it."""
    if value is None:
        return "NULL"
    if pa.types.is_dictionary(type_):
        return render_value(value, type_.value_type, top)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if top:
            return _float_text(value, type_)
        return repr(_shortest_float32(value) if pa.types.is_float32(type_) else value)
    if isinstance(value, decimal.Decimal):
        return format(value.normalize(), "f") if top else format(value, "f")
    if isinstance(value, str):
        return "(empty)" if top and value == "" else value
    if isinstance(value, bytes):
        return value.hex()
    if pa.types.is_map(type_):
        items = ", ".join(
            f"{render_value(k, type_.key_type, False)}: {render_value(v, type_.item_type, False)}"
            for k, v in value
        )
        return "{" + items + "}"
    if isinstance(value, list):
        item_type = getattr(type_, "value_type", pa.null())
        return "[" + ", ".join(render_value(v, item_type, False) for v in value) + "]"
    if isinstance(value, dict) and pa.types.is_struct(type_):
        return "{" + ", ".join(f"{f.name}: {render_value(value[f.name], f.type, False)}" for f in type_) + "}"
    if pa.types.is_interval(type_) and hasattr(value, "months"):
        return _interval_text(value.months, value.days, value.nanoseconds)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)) or hasattr(value, "isoformat"):
        text = _FRACTION.sub(_fraction_text, value.isoformat())
        return text.replace("+00:00", "Z")
    return str(value)


_FRACTION = re.compile(r"\.(\d+)")


def _fraction_text(match: re.Match) -> str:
    """Fractional seconds in groups of three digits, trailing zero groups dropped (as chrono's
    `%.f` prints them)."""
    digits = match.group(1).rstrip("0")
    if not digits:
        return ""
    return "." + match.group(1)[: -(-len(digits) // 3) * 3].ljust(3, "0")


def _interval_text(months: int, days: int, nanos: int) -> str:
    """A month-day-nanosecond interval as arrow-rs prints it: `1 mons 2 days 3 hours 0.5 secs`."""
    parts = [f"{months} mons"] if months else []
    parts += [f"{days} days"] if days else []
    hours, rest = divmod(abs(nanos), 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds, fraction = divmod(rest, 1_000_000_000)
    sign = "-" if nanos < 0 else ""
    parts += [f"{sign}{hours} hours"] if hours else []
    parts += [f"{sign}{minutes} mins"] if minutes else []
    if seconds or fraction:
        parts.append(f"{sign}{seconds}.{fraction:09d} secs" if fraction else f"{sign}{seconds} secs")
    return " ".join(parts) or "0 secs"


_FIXED_OFFSET = re.compile(r"^([+-])(\d\d):?(\d\d)$")


def _local_times(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """A timestamp column in a fixed-offset or UTC time zone as text in that zone (Python
    needs a tz database for named zones; these need none), or None for other columns."""
    if not pa.types.is_timestamp(column.type) or column.type.tz is None:
        return None
    tz = column.type.tz
    match = _FIXED_OFFSET.match(tz)
    if tz.upper() in ("UTC", "Z") or (match and match.group(2) == "00" == match.group(3)):
        offset, suffix = datetime.timedelta(0), "Z"
    elif match:
        minutes = int(match.group(2)) * 60 + int(match.group(3))
        offset = datetime.timedelta(minutes=minutes if match.group(1) == "+" else -minutes)
        suffix = f"{match.group(1)}{match.group(2)}:{match.group(3)}"
    else:
        return None
    values = column.cast(pa.timestamp(column.type.unit)).to_pylist()
    text = [
        None if v is None else render_value(v + offset, pa.timestamp(column.type.unit)) + suffix
        for v in values
    ]
    return pa.chunked_array([pa.array(text, pa.string())])


def render_rows(table: pa.Table) -> list[str]:
    """Each row of `table` as one line: its values separated by single spaces."""
    local = [_local_times(c) for c in table.columns]
    table = pa.Table.from_arrays(
        [c if t is None else t for c, t in zip(table.columns, local, strict=True)], names=table.column_names
    )
    columns = [(c.to_pylist(), c.type) for c in readable(table).columns]
    return [
        " ".join(render_value(values[i], type_) for values, type_ in columns).rstrip()
        for i in range(table.num_rows)
    ]


def _replace_root(lines: Sequence[str], root: str) -> list[str]:
    """Paths under `root` (absolute, or as an object store path without the leading /) as
    DataFusion's runner shows them, under WORKSPACE_ROOT."""
    root = root.rstrip("/")
    return [
        line.replace(root, "WORKSPACE_ROOT").replace(root.lstrip("/"), "WORKSPACE_ROOT") for line in lines
    ]


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _same_token(a: str, b: str) -> bool:
    if a == b:
        return True
    x, y = _number(a), _number(b)
    if x is None or y is None:
        return False
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-11)


def _same_line(a: str, b: str) -> bool:
    if a.rstrip() == b.rstrip():
        return True
    ta, tb = a.split(), b.split()
    return len(ta) == len(tb) and all(_same_token(x, y) for x, y in zip(ta, tb, strict=True))


def _error_matches(expected: str, message: str) -> bool:
    expected = expected.strip().removeprefix("DataFusion error: ")
    if not expected or expected in message:
        return True
    try:
        return re.search(expected, message, re.DOTALL) is not None
    except re.error:
        return False


def _affected_rows(table: pa.Table) -> int:
    if table.num_rows == 1 and table.num_columns == 1 and pa.types.is_integer(table.schema[0].type):
        return int(table.column(0)[0].as_py() or 0)
    return table.num_rows


def expected_mismatch(record: Record, outcome: Outcome, workspace_root: str | None = None) -> str | None:
    """How DataFusion's outcome differs from what the file expects, or None. EXPLAIN output is
    not checked. `workspace_root` is the folder standing for DataFusion's repository: its
    path in results reads `WORKSPACE_ROOT`, as DataFusion's runner writes it."""
    if is_explain(record.sql):
        return None
    if record.expect_error:
        if outcome.ok:
            return "the file expects an error; DataFusion succeeded"
        if not _error_matches(record.error_message, outcome.error or ""):
            return f"the file expects error {record.error_message!r}; DataFusion: {first_line(outcome.error)}"
        return None
    if not outcome.ok:
        return f"the file expects success; DataFusion: {first_line(outcome.error)}"
    assert outcome.table is not None
    if record.kind is RecordKind.STATEMENT:
        if record.count is not None and _affected_rows(outcome.table) != record.count:
            return f"the file expects count {record.count}; DataFusion: {_affected_rows(outcome.table)}"
        return None
    if any("values hashing to" in line for line in record.expected):
        return None  # a hash of the results: not checked
    actual, expected = render_rows(outcome.table), list(record.expected)
    if workspace_root:
        actual = _replace_root(actual, workspace_root)
    if record.sort_mode == "rowsort":
        actual, expected = sorted(actual), sorted(expected)
    elif record.sort_mode == "valuesort":
        actual = sorted(v for line in actual for v in line.split())
        expected = sorted(v for line in expected for v in line.split())
    if len(actual) != len(expected):
        return f"the file expects {len(expected)} rows; DataFusion returned {len(actual)}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if not _same_line(a, e):
            return f"row {i}: the file expects {e!r}; DataFusion: {a!r}"
    return None
