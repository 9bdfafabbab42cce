"""The query history as SQL tables: `distributed.queries`, `distributed.stages`,
`distributed.tasks` and `distributed.workers`, each a snapshot taken when a statement naming
them is planned.

They live in a SessionContext of their own (never the user's, which stays as it was), so a
statement reading them reads only them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa
from datafusion import SessionContext
from datafusion.catalog import Schema

from . import views
from .history import QueryHistory
from .workers import WorkerStatus

SCHEMA = "distributed"
_TIME = pa.timestamp("us", tz="UTC")

COLUMNS: dict[str, pa.Schema] = {
    "queries": pa.schema(
        [
            ("query_id", pa.string()),
            ("sql", pa.string()),
            ("state", pa.string()),
            ("started", _TIME),
            ("ended", _TIME),
            ("seconds", pa.float64()),
            ("stages_done", pa.int64()),
            ("stages_total", pa.int64()),
            ("tasks_running", pa.int64()),
            ("tasks_done", pa.int64()),
            ("rows", pa.int64()),
            ("rows_written", pa.int64()),
            ("bytes_exchanged", pa.int64()),
            ("error", pa.string()),
            ("distributed", pa.bool_()),
        ]
    ),
    "stages": pa.schema(
        [
            ("query_id", pa.string()),
            ("stage", pa.int64()),
            ("name", pa.string()),
            ("output", pa.string()),
            ("inputs", pa.list_(pa.int64())),
            ("state", pa.string()),
            ("planned_tasks", pa.int64()),
            ("tasks", pa.int64()),
            ("tasks_done", pa.int64()),
            ("tasks_running", pa.int64()),
            ("tasks_retried", pa.int64()),
            ("tasks_failed", pa.int64()),
            ("rows", pa.int64()),
            ("bytes", pa.int64()),
            ("seconds", pa.float64()),
            ("reason", pa.string()),
            ("adaptive", pa.string()),
        ]
    ),
    "tasks": pa.schema(
        [
            ("query_id", pa.string()),
            ("stage", pa.int64()),
            ("task", pa.int64()),
            ("attempt", pa.int64()),
            ("worker", pa.string()),
            ("state", pa.string()),
            ("started", _TIME),
            ("ended", _TIME),
            ("seconds", pa.float64()),
            ("queue_seconds", pa.float64()),
            ("input_bytes", pa.int64()),
            ("fetched_bytes", pa.int64()),
            ("output_rows", pa.int64()),
            ("output_bytes", pa.int64()),
            ("error", pa.string()),
            ("metrics", pa.string()),
        ]
    ),
    "workers": pa.schema(
        [
            ("url", pa.string()),
            ("health", pa.string()),
            ("running_tasks", pa.int64()),
            ("worker_running_tasks", pa.int64()),
            ("spool_bytes", pa.int64()),
            ("spool_files", pa.int64()),
            ("memory_bytes", pa.int64()),
            ("in_process", pa.bool_()),
            ("served_bytes", pa.int64()),
            ("version", pa.string()),
            ("lost_at", _TIME),
            ("checked_at", _TIME),
            ("error", pa.string()),
        ]
    ),
}

_NAMED = re.compile(r"\b" + SCHEMA + r"\s*\.\s*(" + "|".join(COLUMNS) + r")\b", re.IGNORECASE)


def named_tables(query: str) -> set[str]:
    """The `distributed.*` tables `query` names (by their short names; empty for none).

    Examples:
        >>> sorted(named_tables("SELECT * FROM distributed.queries JOIN Distributed.Stages USING (query_id)"))
        ['queries', 'stages']
        >>> named_tables("SELECT * FROM queries")
        set()
    """
    return {match.group(1).lower() for match in _NAMED.finditer(query)}


def _table(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    schema = COLUMNS[name]
    columns = {}
    for field in schema:
        values = [row.get(field.name) for row in rows]
        if pa.types.is_timestamp(field.type):  # seconds since the epoch
            values = [None if v is None else int(v * 1e6) for v in values]
            columns[field.name] = pa.array(values, pa.int64()).cast(field.type)
        else:
            columns[field.name] = pa.array(values, field.type)
    return pa.table(columns, schema=schema)


def snapshot(
    history: QueryHistory, workers: WorkerStatus | None, names: Iterable[str] = COLUMNS
) -> dict[str, pa.Table]:
    """The tables `names` (by default all four) as they stand now; `workers` asks every worker
    for its health, only when `workers` is one of them."""
    rows: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "queries": lambda: list(reversed(views.queries(history, sql_chars=None))),
        "stages": lambda: views.all_stages(history),
        "tasks": lambda: views.all_tasks(history),
        "workers": lambda: [views.worker_row(s) for s in workers.states()] if workers is not None else [],
    }
    return {name: _table(name, rows[name]()) for name in names}


def tables_context(
    history: QueryHistory,
    workers: WorkerStatus | None,
    names: Iterable[str] = COLUMNS,
    make: Callable[[], SessionContext] = SessionContext,
) -> SessionContext:
    """A new SessionContext holding the `distributed.*` tables `names` as they stand now."""
    ctx = make()
    ctx.catalog().register_schema(SCHEMA, Schema.memory_schema())
    for name, table in snapshot(history, workers, names).items():
        ctx.register_record_batches(f"{SCHEMA}.{name}", [table.to_batches() or [_empty_batch(table.schema)]])
    return ctx


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.record_batch([pa.array([], f.type) for f in schema], schema=schema)
