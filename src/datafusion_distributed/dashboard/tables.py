"""The query history as SQL tables: `distributed.queries`, `distributed.stages`,
`distributed.tasks` and `distributed.workers`, each a snapshot taken when a statement naming
them is planned.

They live in a SessionContext of their own (never the user's, which stays as it was), so a
statement reading them reads only them."""

from __future__ import annotations

import re
from collections.abc import Callable
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
            ("served_bytes", pa.int64()),
            ("version", pa.string()),
            ("lost_at", _TIME),
            ("checked_at", _TIME),
            ("error", pa.string()),
        ]
    ),
}

_NAMED = re.compile(r"\b" + SCHEMA + r"\s*\.\s*(" + "|".join(COLUMNS) + r")\b", re.IGNORECASE)


def names_tables(query: str) -> bool:
    """Whether `query` names one of the `distributed.*` tables.

    Examples:
        >>> names_tables("SELECT state, count(*) FROM distributed.queries GROUP BY 1")
        True
        >>> names_tables("SELECT * FROM queries")
        False
    """
    return _NAMED.search(query) is not None


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


def snapshot(history: QueryHistory, workers: WorkerStatus | None) -> dict[str, pa.Table]:
    """The four tables as they stand now (`workers` asks every worker for its health)."""
    worker_rows = [views.worker_row(s) for s in workers.states()] if workers is not None else []
    return {
        "queries": _table("queries", list(reversed(views.queries(history, sql_chars=None)))),
        "stages": _table("stages", views.all_stages(history)),
        "tasks": _table("tasks", views.all_tasks(history)),
        "workers": _table("workers", worker_rows),
    }


def tables_context(
    history: QueryHistory, workers: WorkerStatus | None, make: Callable[[], SessionContext] = SessionContext
) -> SessionContext:
    """A new SessionContext holding the `distributed.*` tables as they stand now."""
    ctx = make()
    ctx.catalog().register_schema(SCHEMA, Schema.memory_schema())
    for name, table in snapshot(history, workers).items():
        ctx.register_record_batches(f"{SCHEMA}.{name}", [table.to_batches() or [_empty_batch(table.schema)]])
    return ctx


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.record_batch([pa.array([], f.type) for f in schema], schema=schema)
