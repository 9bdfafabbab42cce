"""The answers to Flight SQL's metadata commands, read from a session's catalogs: catalogs,
database schemas, tables (with their Arrow schemas), table types, and SqlInfo, each in the
schema Flight SQL defines for it and ordered as it asks."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
from datafusion import SessionContext

from ..common.version import __version__

CATALOGS = pa.schema([pa.field("catalog_name", pa.utf8(), nullable=False)])
DB_SCHEMAS = pa.schema(
    [pa.field("catalog_name", pa.utf8()), pa.field("db_schema_name", pa.utf8(), nullable=False)]
)
TABLES = pa.schema([
    pa.field("catalog_name", pa.utf8()),
    pa.field("db_schema_name", pa.utf8()),
    pa.field("table_name", pa.utf8(), nullable=False),
    pa.field("table_type", pa.utf8(), nullable=False),
])  # fmt: skip
TABLES_WITH_SCHEMA = TABLES.append(pa.field("table_schema", pa.binary(), nullable=False))
TABLE_TYPES = pa.schema([pa.field("table_type", pa.utf8(), nullable=False)])

# SqlInfo's value: a dense union, its members in this order (their type codes 0 to 5)
SQL_INFO_VALUE = pa.dense_union([
    pa.field("string_value", pa.utf8()),
    pa.field("bool_value", pa.bool_()),
    pa.field("bigint_value", pa.int64()),
    pa.field("int32_bitmask", pa.int32()),
    pa.field("string_list", pa.list_(pa.field("item", pa.utf8()))),
    pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.field("item", pa.int32())))),
])  # fmt: skip
SQL_INFO = pa.schema(
    [pa.field("info_name", pa.uint32(), nullable=False), pa.field("value", SQL_INFO_VALUE, nullable=False)]
)
_STRING, _BOOL, _INT32 = 0, 1, 3


def sql_info_values() -> dict[int, tuple[int, Any]]:
    """What the server says of itself, by SqlInfo id: (union member, value)."""
    return {
        0: (_STRING, "datafusion-distributed"),  # FLIGHT_SQL_SERVER_NAME
        1: (_STRING, __version__),  # FLIGHT_SQL_SERVER_VERSION
        2: (_STRING, pa.__version__),  # FLIGHT_SQL_SERVER_ARROW_VERSION
        3: (_BOOL, False),  # FLIGHT_SQL_SERVER_READ_ONLY
        4: (_BOOL, True),  # FLIGHT_SQL_SERVER_SQL
        5: (_BOOL, False),  # FLIGHT_SQL_SERVER_SUBSTRAIT
        8: (_INT32, 0),  # FLIGHT_SQL_SERVER_TRANSACTION: SQL_SUPPORTED_TRANSACTION_NONE
        9: (_BOOL, True),  # FLIGHT_SQL_SERVER_CANCEL
        100: (_INT32, 0),  # FLIGHT_SQL_SERVER_STATEMENT_TIMEOUT: none
        504: (_STRING, '"'),  # SQL_IDENTIFIER_QUOTE_CHAR
    }


def sql_info(ids: list[int]) -> pa.Table:
    """The SqlInfo rows of `ids` this server knows (all of them when `ids` is empty)."""
    known = sql_info_values()
    wanted = [i for i in (ids or sorted(known)) if i in known]
    members: list[list[Any]] = [[] for _ in SQL_INFO_VALUE]
    codes, offsets = [], []
    for info in wanted:
        member, value = known[info]
        codes.append(member)
        offsets.append(len(members[member]))
        members[member].append(value)
    children = [
        pa.array(values, type=field.type) for values, field in zip(members, SQL_INFO_VALUE, strict=True)
    ]
    value = pa.UnionArray.from_dense(
        pa.array(codes, pa.int8()),
        pa.array(offsets, pa.int32()),
        children,
        [field.name for field in SQL_INFO_VALUE],
        list(range(len(children))),
    )
    return pa.Table.from_arrays([pa.array(wanted, pa.uint32()), value], schema=SQL_INFO)


def _like(pattern: str | None) -> re.Pattern[str] | None:
    """A Flight SQL filter pattern (`%` any characters, `_` one) as a regular expression."""
    if pattern is None:
        return None
    parts = ("." if c == "_" else ".*" if c == "%" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.DOTALL)


def _matches(pattern: re.Pattern[str] | None, value: str) -> bool:
    return pattern is None or pattern.fullmatch(value) is not None


# the names datafusion-python gives the tables `from_arrow`, `from_pydict` and the like
# register: not the user's
_ANONYMOUS = re.compile(r"c[0-9a-f]{32}")


def _tables(ctx: SessionContext) -> list[dict[str, str]]:
    """Every table of the session, as information_schema lists it (but anonymous ones)."""
    rows = ctx.sql(
        "SELECT table_catalog, table_schema, table_name, table_type FROM information_schema.tables"
    ).to_pylist()
    named = [r for r in rows if not _ANONYMOUS.fullmatch(r["table_name"])]
    return sorted(
        named, key=lambda r: (r["table_catalog"], r["table_schema"], r["table_name"], r["table_type"])
    )


def catalogs(ctx: SessionContext) -> pa.Table:
    """CommandGetCatalogs: the session's catalogs, by name."""
    names = sorted({row["table_catalog"] for row in _tables(ctx)})
    return pa.Table.from_pydict({"catalog_name": names}, schema=CATALOGS)


def db_schemas(ctx: SessionContext, catalog: str | None, pattern: str | None) -> pa.Table:
    """CommandGetDbSchemas: the schemas of `catalog` (None: of every catalog) whose names
    match `pattern`."""
    like = _like(pattern)
    found = sorted({
        (row["table_catalog"], row["table_schema"])
        for row in _tables(ctx)
        if (catalog is None or row["table_catalog"] == catalog) and _matches(like, row["table_schema"])
    })  # fmt: skip
    return pa.Table.from_pylist(
        [{"catalog_name": c, "db_schema_name": s} for c, s in found], schema=DB_SCHEMAS
    )


def tables(
    ctx: SessionContext,
    catalog: str | None,
    schema_pattern: str | None,
    table_pattern: str | None,
    table_types: list[str],
    include_schema: bool,
) -> pa.Table:
    """CommandGetTables: the tables matching the filters, with their Arrow schemas (as IPC
    messages) when `include_schema`."""
    schemas, names = _like(schema_pattern), _like(table_pattern)
    rows = []
    for row in _tables(ctx):
        if catalog is not None and row["table_catalog"] != catalog:
            continue
        if not (_matches(schemas, row["table_schema"]) and _matches(names, row["table_name"])):
            continue
        if table_types and row["table_type"] not in table_types:
            continue
        found = {
            "catalog_name": row["table_catalog"],
            "db_schema_name": row["table_schema"],
            "table_name": row["table_name"],
            "table_type": row["table_type"],
        }
        if include_schema:
            found["table_schema"] = table_schema(ctx, row).serialize().to_pybytes()
        rows.append(found)
    return pa.Table.from_pylist(rows, schema=TABLES_WITH_SCHEMA if include_schema else TABLES)


def table_schema(ctx: SessionContext, row: dict[str, str]) -> pa.Schema:
    """The Arrow schema of the table information_schema lists as `row`."""
    name = ".".join(
        '"' + row[key].replace('"', '""') + '"' for key in ("table_catalog", "table_schema", "table_name")
    )
    return ctx.sql(f"SELECT * FROM {name} LIMIT 0").schema()


def table_types(ctx: SessionContext) -> pa.Table:
    """CommandGetTableTypes: the kinds of table the session has."""
    kinds = sorted({row["table_type"] for row in _tables(ctx)} | {"BASE TABLE", "VIEW"})
    return pa.Table.from_pydict({"table_type": kinds}, schema=TABLE_TYPES)
