"""The small adversarial tables generated queries read, made the same from the same seed.

Every table has the same columns, so any two join and any query reads any of them:

- `id` BIGINT, mostly unique; `k` BIGINT, a join key of few values with NULLs;
- `f` DOUBLE with NULL, NaN, -0.0, 0.0 and infinities; `d` DECIMAL(12, 2) up to its limits;
- `s` VARCHAR with NULL, '', unicode and case; `dk` a dictionary-encoded VARCHAR (as a
  partition column arrives), sometimes all NULL in a file;
- `dt` DATE; `b` BOOLEAN.

`t1`, `t2` are Parquet tables of several files (so scans split across tasks); `o` is one
Parquet file sorted by `id` and declared so (`WITH ORDER`: plans that keep an order); `m` is
a memory table of several partitions (`register_record_batches`); `e` is an empty Parquet
table.
"""

from __future__ import annotations

import datetime
import decimal
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
from datafusion import SessionContext

COLUMNS: dict[str, str] = {
    "id": "int",
    "k": "int",
    "f": "float",
    "d": "decimal",
    "s": "string",
    "dk": "string",
    "dt": "date",
    "b": "bool",
}
TABLES = ("t1", "t2", "o", "m", "e")

_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("k", pa.int64()),
        ("f", pa.float64()),
        ("d", pa.decimal128(12, 2)),
        ("s", pa.string()),
        ("dk", pa.dictionary(pa.int32(), pa.string())),
        ("dt", pa.date32()),
        ("b", pa.bool_()),
    ]
)
_FLOATS = [None, float("nan"), -0.0, 0.0, 1.5, -2.25, 1e300, float("inf"), float("-inf"), 3.0]
_DECIMALS = [None, "0", "-0.01", "9999999999.99", "-9999999999.99", "12.50", "1.05", "100"]
_STRINGS = [None, "", "a", "A", "ab", "b", "ß", "é", "日本", "🦆", "zz", "a b"]
_LABELS = [None, "x", "y", "z", "ä"]


def _rows(rng: random.Random, count: int, first_id: int, keys: int) -> dict[str, list]:
    start = datetime.date(2020, 1, 1)
    return {
        "id": [first_id + i if rng.random() > 0.05 else None for i in range(count)],
        "k": [rng.randrange(keys) if rng.random() > 0.15 else None for _ in range(count)],
        "f": [
            rng.choice(_FLOATS) if rng.random() < 0.5 else round(rng.uniform(-50, 50), 3)
            for _ in range(count)
        ],
        "d": [None if (v := rng.choice(_DECIMALS)) is None else decimal.Decimal(v) for _ in range(count)],
        "s": [rng.choice(_STRINGS) for _ in range(count)],
        "dk": [rng.choice(_LABELS) for _ in range(count)],
        "dt": [
            start + datetime.timedelta(days=rng.randrange(-400, 400)) if rng.random() > 0.1 else None
            for _ in range(count)
        ],
        "b": [rng.choice([True, False, None]) for _ in range(count)],
    }


def _table(columns: dict[str, list]) -> pa.Table:
    arrays = []
    for field in _SCHEMA:
        values = columns[field.name]
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, pa.string()).dictionary_encode().cast(field.type))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(arrays, schema=_SCHEMA)


def _parquet(folder: str, name: str, parts: list[pa.Table]) -> str:
    path = os.path.join(folder, name)
    os.makedirs(path, exist_ok=True)
    for i, part in enumerate(parts):
        pq.write_table(part, os.path.join(path, f"part-{i}.parquet"))
    return path


def write_tables(folder: str, seed: int) -> dict[str, object]:
    """Write the Parquet tables under `folder` and make the memory table's partitions; what
    `register_tables` registers."""
    rng = random.Random(seed)
    t1_parts = []
    for i in range(4):
        rows = _rows(rng, rng.randrange(15, 45), 1000 * i, 8)
        if i == 0:
            rows["dk"] = [None] * len(rows["dk"])  # a file whose dictionary column is all NULL
        t1_parts.append(_table(rows))
    t2_parts = [_table(_rows(rng, rng.randrange(10, 30), 500 + 100 * i, 10)) for i in range(3)]
    ordered = _table(_rows(rng, 60, 2000, 7)).sort_by([("id", "ascending")])  # NULLs last
    memory = [_table(_rows(rng, rng.randrange(8, 25), 700 + 50 * i, 6)).to_batches() for i in range(3)]
    return {
        "t1": _parquet(folder, "t1", t1_parts),
        "t2": _parquet(folder, "t2", t2_parts),
        "e": _parquet(folder, "e", [_SCHEMA.empty_table()]),
        "o": _parquet(folder, "o", [ordered]),
        "m": memory,
    }


def register_tables(ctx: SessionContext, tables: dict[str, object]) -> None:
    """Register what `write_tables` made on `ctx`."""
    for name, source in tables.items():
        if name == "o":
            ctx.sql(
                f"CREATE EXTERNAL TABLE o STORED AS PARQUET LOCATION '{source}' WITH ORDER (id ASC NULLS LAST)"
            )
        elif isinstance(source, str):
            ctx.register_parquet(name, source)
        else:
            ctx.register_record_batches(name, source)
