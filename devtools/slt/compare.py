"""Classify one sqllogictest record from the outcomes of the reference and candidate engines.

Categories (see `Category`): `equal`, `distributed_wrong` (different results, or only the
reference failed), `distributed_only_error`, `both_error`, `nondeterministic` (different
results the SQL allows: a LIMIT that may pick other rows, a volatile function), `explain`
(EXPLAIN output differs by design: counted, not compared), `not_serialisable` (roundtrip
mode: the plan could not be encoded) and `skipped`.

Results compare as SQL results with `compare.assert_tables_equal`: as multisets unless the
query has a top-level ORDER BY (and no `rowsort` / `valuesort`), numbers with a tolerance,
Arrow type flavours alike. Columns compare by position; different column names are a
difference too.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from enum import Enum

import pyarrow as pa

from datafusion_distributed.common.errors import first_line
from datafusion_distributed.test_utils.compare import _tokens, assert_tables_equal, order_by_keys

from .engines import SERIALISE, Outcome

__all__ = [
    "Category",
    "Verdict",
    "classify",
    "compare_tables",
    "first_line",
    "is_explain",
    "nondeterminism_reason",
    "readable",
]


class Category(str, Enum):
    """How a record's two outcomes compare (the module docstring says what each means)."""

    EQUAL = "equal"
    DISTRIBUTED_WRONG = "distributed_wrong"
    DISTRIBUTED_ONLY_ERROR = "distributed_only_error"
    BOTH_ERROR = "both_error"
    NONDETERMINISTIC = "nondeterministic"
    EXPLAIN = "explain"
    NOT_SERIALISABLE = "not_serialisable"
    KEPT_ON_ONE_NODE = "kept_on_one_node"  # roundtrip: a difference DistributedContext avoids
    SKIPPED = "skipped"


#: Categories that mean the candidate engine is at fault.
FAILURES = (Category.DISTRIBUTED_WRONG, Category.DISTRIBUTED_ONLY_ERROR, Category.NOT_SERIALISABLE)


@dataclass(frozen=True)
class Verdict:
    """A record's category, with a short explanation (a diff, a reason) and, when both
    engines failed, whether their messages agree on the first line."""

    category: Category
    detail: str = ""
    same_first_line: bool | None = None


_VOLATILE = re.compile(
    r"\b(random|now|uuid|current_timestamp|current_time|current_date|localtime|localtimestamp)\b",
    re.IGNORECASE,
)
_LIMITS = {"LIMIT", "OFFSET", "FETCH"}


def _without_tz(type_: pa.DataType) -> pa.DataType:
    """`type_` with every timestamp's time zone dropped (nested types included)."""
    if pa.types.is_timestamp(type_) and type_.tz is not None:
        return pa.timestamp(type_.unit)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        item = type_.value_field.with_type(_without_tz(type_.value_type))
        if pa.types.is_fixed_size_list(type_):
            return pa.list_(item, type_.list_size)
        return pa.large_list(item) if pa.types.is_large_list(type_) else pa.list_(item)
    if pa.types.is_struct(type_):
        return pa.struct([f.with_type(_without_tz(f.type)) for f in type_])
    return type_


def _readable_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    try:
        column.to_pylist()
        return column
    except Exception:
        pass
    naive = _without_tz(column.type)
    if naive != column.type:
        try:
            converted = column.cast(naive)
            converted.to_pylist()
            return converted
        except Exception:
            pass
    try:
        return column.cast(pa.string())
    except Exception:
        # Arrow's own printing, row by row (some types cannot even be wrapped in Python)
        nulls = column.is_null().to_pylist()
        text = [
            None if null else " ".join(column.slice(i, 1).to_string(indent=0, window=1000).split())
            for i, null in enumerate(nulls)
        ]
        return pa.chunked_array([pa.array(text, pa.string())])


def readable(table: pa.Table) -> pa.Table:
    """`table` with each column Python cannot read as values (a timestamp in a named time zone
    without a tz database, a date beyond year 9999, ...) replaced by one it can: its time zone
    dropped (values stay UTC), else its text as Arrow prints it."""
    columns = [_readable_column(c) for c in table.columns]
    if all(a is b for a, b in zip(columns, table.columns, strict=True)):
        return table
    return pa.Table.from_arrays(columns, names=table.column_names)


def is_explain(sql: str) -> bool:
    """Whether the statement is an EXPLAIN (its output is a plan, which differs by design)."""
    tokens = _tokens(sql)
    return bool(tokens) and tokens[0][1].upper() == "EXPLAIN"


def compare_tables(reference: pa.Table, candidate: pa.Table, sql: str, sort_mode: str | None) -> str | None:
    """None when the two results are the same SQL result, else what differs."""
    reference, candidate = readable(reference), readable(candidate)
    if reference.num_columns != candidate.num_columns:
        return (
            f"column count differs: datafusion {reference.column_names}, distributed {candidate.column_names}"
        )
    positional = candidate.rename_columns(reference.column_names)
    unordered = sort_mode in ("rowsort", "valuesort")
    try:
        assert_tables_equal(positional, reference, ordered=False if unordered else None, sql=sql)
    except AssertionError as exc:
        return str(exc).replace("actual", "distributed").replace("expected", "datafusion")
    except Exception:  # values the comparison cannot sort or read: compare their text
        if Counter(map(repr, positional.to_pylist())) != Counter(map(repr, reference.to_pylist())):
            return "rows differ (compared as text)"
    if reference.column_names != candidate.column_names:
        return (
            f"column names differ: datafusion {reference.column_names}, distributed {candidate.column_names}"
        )
    return None


def _limit_levels(sql: str) -> list[tuple[int, bool]]:
    """For each LIMIT / OFFSET / FETCH in the SQL: its parenthesis depth, and whether its
    query level has an ORDER BY."""
    ordered = [False]  # one entry per parenthesis level
    found = []
    tokens = _tokens(sql)
    for i, (kind, text) in enumerate(tokens):
        word = text.upper() if kind == "word" else ""
        if text == "(":
            ordered.append(False)
        elif text == ")" and len(ordered) > 1:
            ordered.pop()
        elif word == "ORDER" and i + 1 < len(tokens) and tokens[i + 1][1].upper() == "BY":
            ordered[-1] = True
        elif word in _LIMITS:
            found.append((len(ordered) - 1, ordered[-1]))
    return found


def nondeterminism_reason(sql: str, reference: pa.Table, candidate: pa.Table) -> str | None:
    """Why two different results of `sql` may both be right, or None (then they may not).

    Allowed: a volatile function (random(), now(), ...); a LIMIT/OFFSET whose query level has
    no ORDER BY (it may keep any rows), when both results have as many rows; a top-level
    ORDER BY ... LIMIT when both results list the same ORDER BY keys row by row (so they
    differ only within rows tied on the keys)."""
    if _VOLATILE.search(sql):
        return "the query calls a volatile function"
    reference, candidate = readable(reference), readable(candidate)
    if reference.num_rows != candidate.num_rows or reference.num_columns != candidate.num_columns:
        return None
    levels = _limit_levels(sql)
    if not levels:
        return None
    if not all(has_order_by for _, has_order_by in levels):
        return "LIMIT/OFFSET without ORDER BY may keep different rows"
    keys = order_by_keys(sql)
    names = reference.column_names
    if keys is None or any(depth > 0 for depth, _ in levels):
        return None
    indexes = [k - 1 if isinstance(k, int) else _index(k, names) for k in keys]
    if any(i is None or not 0 <= i < len(names) for i in indexes):
        return None
    positional = candidate.rename_columns(names)
    if all(reference.column(i).to_pylist() == positional.column(i).to_pylist() for i in indexes):
        return "LIMIT cuts through rows tied on the ORDER BY keys"
    return None


def _index(name: str, names: list[str]) -> int | None:
    folded = [n.lower() for n in names]
    return folded.index(name.lower()) if name.lower() in folded else None


def classify(sql: str, sort_mode: str | None, reference: Outcome, candidate: Outcome) -> Verdict:
    """The category of a record both engines ran."""
    if is_explain(sql):
        return Verdict(Category.EXPLAIN)
    if candidate.stage == SERIALISE:
        return Verdict(Category.NOT_SERIALISABLE, first_line(candidate.error, 500))
    if reference.ok and candidate.ok:
        assert reference.table is not None and candidate.table is not None
        diff = compare_tables(reference.table, candidate.table, sql, sort_mode)
        if diff is None:
            return Verdict(Category.EQUAL)
        reason = nondeterminism_reason(sql, reference.table, candidate.table)
        if reason is not None:
            return Verdict(Category.NONDETERMINISTIC, f"{reason}; {diff}")
        return Verdict(Category.DISTRIBUTED_WRONG, diff)
    if candidate.ok:
        return Verdict(
            Category.DISTRIBUTED_WRONG, "DataFusion raised an error, distributed returned a result"
        )
    if reference.ok:
        return Verdict(Category.DISTRIBUTED_ONLY_ERROR, first_line(candidate.error, 500))
    a, b = first_line(reference.error), first_line(candidate.error)
    return Verdict(Category.BOTH_ERROR, same_first_line=bool(a) and (a == b or a in b or b in a))
