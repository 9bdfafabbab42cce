"""How the `sql` command prints a result: `--format` and `--maxrows`, with datafusion-cli's
names and defaults (a table of at most 40 rows; csv, tsv, json and nd-json whole)."""

from __future__ import annotations

import argparse
import csv
import io
import json
from typing import Any

import pyarrow as pa

from ..api.dataframe import format_table

FORMATS = ("automatic", "table", "csv", "tsv", "json", "nd-json")
DEFAULT_MAXROWS = 40  # datafusion-cli's: rows a table shows


def parse_maxrows(text: str) -> int | None:
    """`--maxrows`: a number of rows, or `inf` for all of them (None)."""
    if text.lower() == "inf":
        return None
    try:
        rows = int(text)
    except ValueError:
        rows = -1
    if rows < 0:
        raise argparse.ArgumentTypeError(f"--maxrows takes a number of rows or inf, got {text!r}")
    return rows


def _plain(value: Any) -> Any:
    """A value as JSON writes it: numbers, strings, booleans, null, lists and objects."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # dates, times, decimals, bytes: as their text


def format_result(table: pa.Table, fmt: str, maxrows: int | None = DEFAULT_MAXROWS) -> str:
    """`table` printed in `fmt` (one of FORMATS; "automatic" is a table); a table shows at most
    `maxrows` rows (None: all), saying how many were left out."""
    if fmt in ("automatic", "table"):
        shown = table if maxrows is None or table.num_rows <= maxrows else table.slice(0, maxrows)
        text = format_table(shown)
        if shown.num_rows < table.num_rows:
            text += f"\n{shown.num_rows} of {table.num_rows} rows shown (--maxrows inf for all)"
        return text
    rows = table.to_pylist()
    if fmt == "json":
        return json.dumps([_plain(row) for row in rows], ensure_ascii=False)
    if fmt == "nd-json":
        return "\n".join(json.dumps(_plain(row), ensure_ascii=False) for row in rows)
    out = io.StringIO()
    writer = csv.writer(out, delimiter="," if fmt == "csv" else "\t", lineterminator="\n")
    writer.writerow(table.column_names)
    writer.writerows([["" if v is None else v for v in row.values()] for row in rows])
    return out.getvalue().rstrip("\n")
