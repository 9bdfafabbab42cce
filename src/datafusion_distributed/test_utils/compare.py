"""Compare query results the way a SQL user would, not byte for byte.

The main entry point is :func:`assert_tables_equal`. It is meant for checking a query
result against a reference (another engine, or single-node DataFusion) and tolerates the
differences that do not change the meaning of a result:

* Row order is ignored unless the query orders its rows. With ``ordered=None`` the SQL
  text decides: a top-level ``ORDER BY`` (one not inside parentheses, so not in a
  subquery, CTE or window) means ordered.
* Ordered results may list rows that tie on the ``ORDER BY`` keys in any order. So an
  ordered comparison checks two things: the two results hold the same rows (as a
  multiset), and the sequence of ``ORDER BY`` key values is the same row by row. The keys
  are taken from ``order_by`` or parsed from the SQL when every key is a plain column name
  or a 1-based output position. When the SQL orders by anything else (an expression, a
  column that is not in the output), only the content is compared. With
  ``ordered=True`` and neither SQL nor keys, the rows are compared strictly in order.
* Numbers are compared by value across integer, decimal and floating types. Two exact
  values (integer or decimal, any precision or scale) must be equal. As soon as one side
  is floating point, values match within ``rel_tol`` (or ``abs_tol`` near zero); against
  a decimal, also within one unit of the decimal's last digit, since engines cut results
  such as ``avg`` of a decimal to a fixed scale where others return a double.
* Strings, dates and timestamps compare by value whatever their Arrow flavour
  (``string`` / ``large_string`` / ``string_view``, ``date32`` / ``date64``, units).
* Nulls are equal to nulls, and NaN to NaN.

A ``LIMIT`` that cuts through a group of tied rows can legitimately select different rows
in two engines; that is not tolerated here and needs the caller's attention.
"""

from __future__ import annotations

import decimal
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from .distribution import LEDGER

__all__ = [
    "assert_tables_equal",
    "is_ordered_query",
    "order_by_keys",
    "to_arrow_table",
]

# How many differing rows an error message shows.
_MAX_SHOWN = 5


# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


def to_arrow_table(data: Any) -> pa.Table:
    """Turn a query result into a ``pyarrow.Table``.

    Accepts a ``pa.Table``, a ``pa.RecordBatch`` or a list of them, a pandas or polars
    data frame, a DataFusion ``DataFrame``, a DuckDB relation, or anything that exports
    the Arrow C stream interface.
    """
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, list) and all(isinstance(b, pa.RecordBatch) for b in data):
        if not data:
            raise ValueError("cannot build a table from an empty list of record batches")
        return pa.Table.from_batches(data)
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    for method in ("to_arrow_table", "to_arrow", "arrow"):
        convert = getattr(data, method, None)
        if callable(convert):
            result = convert()
            if isinstance(result, pa.RecordBatchReader):
                result = result.read_all()
            if isinstance(result, pa.Table):
                return result
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    raise TypeError(f"cannot compare a {type(data).__name__}; pass a pyarrow.Table")


# --------------------------------------------------------------------------------------
# Reading the SQL
# --------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<line_comment>--[^\n]*)
    | (?P<block_comment>/\*.*?\*/)
    | (?P<string>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*")
    | (?P<number>\d+(?:\.\d*)?)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_ORDER_BY_END = {"LIMIT", "OFFSET", "FETCH"}
_ORDER_BY_MODIFIERS = {"ASC", "DESC", "NULLS", "FIRST", "LAST"}


def _tokens(sql: str) -> list[tuple[str, str]]:
    """Split SQL into (kind, text) tokens, dropping whitespace and comments."""
    out = []
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup or ""
        if kind in ("space", "line_comment", "block_comment"):
            continue
        out.append((kind, match.group()))
    return out


def _top_level_order_by(sql: str) -> list[list[tuple[str, str]]] | None:
    """Tokens of each item of the top-level ORDER BY, or None when there is none."""
    tokens = _tokens(sql)
    depth = 0
    start = None
    for i, (kind, text) in enumerate(tokens):
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
        elif (
            depth == 0
            and kind == "word"
            and text.upper() == "ORDER"
            and i + 1 < len(tokens)
            and tokens[i + 1][1].upper() == "BY"
        ):
            start = i + 2  # the last top-level ORDER BY wins (e.g. after a UNION)
    if start is None:
        return None

    items: list[list[tuple[str, str]]] = [[]]
    depth = 0
    for kind, text in tokens[start:]:
        if depth == 0 and (text == ";" or text == ")" or (kind == "word" and text.upper() in _ORDER_BY_END)):
            break
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
        if depth == 0 and text == ",":
            items.append([])
        else:
            items[-1].append((kind, text))
    return items


def is_ordered_query(sql: str) -> bool:
    """Whether the query's top-level SELECT has an ORDER BY (so its row order is meaningful)."""
    return _top_level_order_by(sql) is not None


def order_by_keys(sql: str) -> list[str | int] | None:
    """The top-level ORDER BY keys when each is a plain column name or an output position.

    Names are returned lower-cased unless they were quoted; a qualified name ``t.col``
    gives ``col``; positions are returned as 1-based ints. Returns None when there is no
    top-level ORDER BY or when any key is something else (an expression, a function call).
    """
    items = _top_level_order_by(sql)
    if items is None:
        return None
    keys: list[str | int] = []
    for item in items:
        while item and item[-1][0] == "word" and item[-1][1].upper() in _ORDER_BY_MODIFIERS:
            item = item[:-1]
        if len(item) == 1 and item[0][0] == "number" and item[0][1].isdigit():
            keys.append(int(item[0][1]))
            continue
        # name, or qualifier . name (possibly several qualifiers)
        names = item[0::2]
        dots = item[1::2]
        if not names or len(item) % 2 == 0 or any(d[1] != "." for d in dots):
            return None
        if any(kind not in ("word", "quoted") for kind, _ in names):
            return None
        kind, text = names[-1]
        keys.append(text[1:-1].replace('""', '"') if kind == "quoted" else text.lower())
    return keys


# --------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------


# Families of Arrow types, tried in order, each with the `pyarrow.types.is_*` tests of its
# members; a type in none of them is its own family.
_KINDS = {
    "null": ("null",),
    "bool": ("boolean",),
    "number": ("integer", "decimal", "floating"),
    "string": ("string", "large_string", "string_view"),
    "binary": ("binary", "large_binary", "binary_view", "fixed_size_binary"),
    "date": ("date",),
    "timestamp": ("timestamp",),
    "list": ("list", "large_list", "fixed_size_list", "list_view", "large_list_view"),
}


def _kind(t: pa.DataType) -> str:
    """A coarse family of an Arrow type; columns compare only within a family."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    for kind, members in _KINDS.items():
        if any(getattr(pa.types, f"is_{member}")(t) for member in members):
            return kind
    return str(t)


def _column_values(column: pa.ChunkedArray) -> list[Any]:
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column.to_pylist()


class _Comparer:
    """Compares rows of two results with the given column names and tolerances."""

    def __init__(
        self, names: Sequence[str], approximate: Sequence[bool], rel_tol: float, abs_tol: float
    ) -> None:
        self.names = list(names)
        self.approximate = list(approximate)  # per column: is either side floating point?
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol

    def equal(self, a: Any, b: Any) -> bool:
        if a is None or b is None:
            return a is None and b is None
        if isinstance(a, bool) or isinstance(b, bool):
            return type(a) is type(b) and a == b
        numbers = (int, float, decimal.Decimal)
        if isinstance(a, float) or isinstance(b, float):
            if not (isinstance(a, numbers) and isinstance(b, numbers)):
                return False
            fa, fb = float(a), float(b)
            if math.isnan(fa) or math.isnan(fb):
                return math.isnan(fa) and math.isnan(fb)
            abs_tol = self.abs_tol
            for exact in (a, b):
                if isinstance(exact, decimal.Decimal) and exact.is_finite():
                    # A decimal holds the exact value cut to its scale: allow one unit in
                    # its last digit, e.g. 0.050081 (scale 6) matches 0.0500813390.
                    exponent = exact.as_tuple().exponent
                    assert isinstance(exponent, int)  # a finite decimal's
                    abs_tol = max(abs_tol, float(decimal.Decimal(1).scaleb(exponent)))
            return math.isclose(fa, fb, rel_tol=self.rel_tol, abs_tol=abs_tol)
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(self.equal(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(self.equal(a[k], b[k]) for k in a)
        # Exact numbers compare by value whatever the scale: Decimal("1.50") == 1.5 == ...
        return a == b

    def sorted_rows(self, rows: list[tuple]) -> list[tuple]:
        # Exact columns lead the sort key so that tiny floating point differences rarely
        # change the relative order of otherwise equal rows.
        order = [i for i, approx in enumerate(self.approximate) if not approx]
        order += [i for i, approx in enumerate(self.approximate) if approx]
        return sorted(rows, key=lambda row: tuple(_sort_key(row[i], self.approximate[i]) for i in order))

    def compare_rows(self, actual: list[tuple], expected: list[tuple], how: str) -> None:
        if len(actual) != len(expected):
            raise AssertionError(
                f"row count differs: actual has {len(actual)} rows, expected {len(expected)}\n"
                + self.only_on_one_side(actual, expected)
            )
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            bad = [j for j in range(len(self.names)) if not self.equal(a[j], e[j])]
            if not bad:
                continue
            col = bad[0]
            raise AssertionError(
                f"rows differ at row {i} ({how}), column {self.names[col]!r}: "
                f"actual {_display(a[col])}, expected {_display(e[col])}\n"
                f"  actual row:   {_display_row(self.names, a)}\n"
                f"  expected row: {_display_row(self.names, e)}\n" + self.only_on_one_side(actual, expected)
            )

    def only_on_one_side(self, actual: list[tuple], expected: list[tuple]) -> str:
        """Rows found on one side only (approximate numbers blurred), for error messages."""

        def counted(rows: Iterable[tuple]) -> Counter:
            return Counter(
                tuple(_display_key(v, approx) for v, approx in zip(row, self.approximate, strict=True))
                for row in rows
            )

        a_count, e_count = counted(actual), counted(expected)
        lines = []
        for label, only in (("actual", a_count - e_count), ("expected", e_count - a_count)):
            rows = list(only.elements())
            if rows:
                shown = "\n".join(f"    {_display_row(self.names, r)}" for r in rows[:_MAX_SHOWN])
                more = f"\n    ... and {len(rows) - _MAX_SHOWN} more" if len(rows) > _MAX_SHOWN else ""
                lines.append(f"  rows only in {label} ({len(rows)}):\n{shown}{more}")
        return "\n".join(lines)

    def compare_order_keys(self, actual: list[tuple], expected: list[tuple], indexes: list[int]) -> None:
        key_names = [self.names[i] for i in indexes]
        for row, (a, e) in enumerate(zip(actual, expected, strict=True)):
            a_key = [a[i] for i in indexes]
            e_key = [e[i] for i in indexes]
            if not all(self.equal(x, y) for x, y in zip(a_key, e_key, strict=True)):
                raise AssertionError(
                    f"row order differs at row {row} on ORDER BY keys {key_names}: "
                    f"actual {_display_row(key_names, a_key)}, expected {_display_row(key_names, e_key)}"
                )


def _sort_key(value: Any, approximate: bool) -> tuple:
    """A key that sorts any column's values, nulls first and NaN last."""
    if value is None:
        return (0,)
    if approximate:
        f = float(value)
        return (2,) if math.isnan(f) else (1, f)
    if isinstance(value, (list, tuple, dict)):
        return (1, repr(value))
    return (1, value)


def _display(value: Any) -> str:
    if isinstance(value, decimal.Decimal):
        return str(value)
    return repr(value)


def _display_row(names: Sequence[str], row: Sequence[Any]) -> str:
    return "{" + ", ".join(f"{n}: {_display(v)}" for n, v in zip(names, row, strict=True)) + "}"


def _display_key(value: Any, approximate: bool) -> Any:
    """A hashable form of a value, numbers in approximate columns blurred to 6 digits.

    Only used to list the rows found on one side only in error messages.
    """
    if approximate and value is not None:
        f = float(value)
        return f if not math.isfinite(f) else float(f"{f:.6g}")
    if isinstance(value, (list, dict)):
        return repr(value)
    return value


# --------------------------------------------------------------------------------------
# The assertion
# --------------------------------------------------------------------------------------


def assert_tables_equal(
    actual: Any,
    expected: Any,
    *,
    ordered: bool | None = None,
    sql: str | None = None,
    order_by: Sequence[str | int] | None = None,
    rel_tol: float = 1e-6,
    abs_tol: float = 1e-9,
) -> None:
    """Assert that two query results are equal as SQL results; raise AssertionError if not.

    ``actual`` and ``expected`` are Arrow tables or anything :func:`to_arrow_table` takes.

    ``ordered``: whether row order matters. None (the default) decides from ``sql``: a
    top-level ORDER BY means ordered; with no SQL, None means unordered.

    ``order_by``: the keys (output column names or 1-based positions) the rows are ordered
    by, so that rows tied on them may come in any order; by default parsed from ``sql``.
    See the module docstring for what is compared in each case.

    ``rel_tol`` / ``abs_tol``: tolerance used whenever one of two numbers is floating point.

    Each call is counted (see `distribution`): a test comparing a distributed answer also
    shows how its query ran.
    """
    LEDGER.compared += 1
    actual = to_arrow_table(actual)
    expected = to_arrow_table(expected)

    if actual.column_names != expected.column_names:
        raise AssertionError(
            f"column names differ:\n  actual:   {actual.column_names}\n  expected: {expected.column_names}"
        )
    names = expected.column_names

    approximate = []
    for name, a_field, e_field in zip(names, actual.schema, expected.schema, strict=True):
        a_kind, e_kind = _kind(a_field.type), _kind(e_field.type)
        if a_kind != e_kind and "null" not in (a_kind, e_kind):
            raise AssertionError(
                f"column {name!r} has incomparable types: actual {a_field.type}, expected {e_field.type}"
            )
        approximate.append(pa.types.is_floating(a_field.type) or pa.types.is_floating(e_field.type))

    if ordered is None:
        ordered = sql is not None and is_ordered_query(sql)
    key_indexes: list[int] | None = None
    content_only = False  # ordered by something that cannot be checked: compare content
    if ordered and order_by is not None:
        key_indexes = _key_indexes(order_by, names)
        if key_indexes is None:
            raise ValueError(f"order_by {list(order_by)} names a column not in {names}")
    elif ordered and sql is not None and is_ordered_query(sql):
        keys = order_by_keys(sql)
        key_indexes = None if keys is None else _key_indexes(keys, names)
        content_only = key_indexes is None

    comparer = _Comparer(names, approximate, rel_tol, abs_tol)
    a_rows, e_rows = _rows(actual), _rows(expected)

    if ordered and key_indexes is None and not content_only:
        comparer.compare_rows(a_rows, e_rows, "in order")
        return
    comparer.compare_rows(comparer.sorted_rows(a_rows), comparer.sorted_rows(e_rows), "sorted by all columns")
    if key_indexes is not None:
        comparer.compare_order_keys(a_rows, e_rows, key_indexes)


def _rows(table: pa.Table) -> list[tuple]:
    if table.num_columns == 0:
        return [()] * table.num_rows
    return list(zip(*(_column_values(c) for c in table.columns), strict=True))


def _key_indexes(keys: Sequence[str | int], names: Sequence[str]) -> list[int] | None:
    """The column index of each key, or None when one names no column."""
    found = [_key_index(k, names) for k in keys]
    return None if None in found else [i for i in found if i is not None]


def _key_index(key: str | int, names: Sequence[str]) -> int | None:
    """Position of an ORDER BY key among the output columns (names match case-insensitively)."""
    if isinstance(key, int):
        return key - 1 if 1 <= key <= len(names) else None
    if key in names:
        return names.index(key)
    folded = [n.lower() for n in names]
    if folded.count(key.lower()) == 1:
        return folded.index(key.lower())
    return None
