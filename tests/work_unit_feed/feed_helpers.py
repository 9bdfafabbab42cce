"""Feeds shared by the work-unit feed tests, and the oracle they are checked against: the same
units read into a plain table of single-node DataFusion."""

from __future__ import annotations

import threading

import pyarrow as pa
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, read_units
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node

EVENTS = pa.schema([("unit", pa.int64()), ("k", pa.int64()), ("v", pa.float64()), ("tag", pa.string())])


def read_event_unit(unit: int) -> pa.Table:
    """A unit's rows: 3 to 7 of them, keys unique over all units."""
    rows = unit % 5 + 3
    return pa.table(
        {
            "unit": [unit] * rows,
            "k": [unit * 100 + i for i in range(rows)],
            "v": [unit + i / 10 for i in range(rows)],
            "tag": [f"t{(unit + i) % 4}" for i in range(rows)],
        }
    )


def events_provider(units: int):
    """A provider function: each query gets a new generator of `units` units."""

    def provider():
        yield from range(units)

    return provider


def register_events(dctx: DistributedContext, name: str = "events", units: int = 40, **kwargs):
    """A feed of `units` event units as table `name`."""
    return dctx.register_feed(name, events_provider(units), read_event_unit, EVENTS, **kwargs)


def oracle(
    feeds, tables: dict[str, str] | None = None, config: SessionConfig | None = None
) -> SessionContext:
    """Single-node DataFusion with each feed's units read into a plain table of its name, and
    the parquet `tables` (name -> path)."""
    ctx = SessionContext(config) if config is not None else SessionContext()
    for feed in feeds:
        ctx.register_view(feed.name, ctx.from_arrow(read_units(feed)))
    for name, path in (tables or {}).items():
        ctx.register_parquet(name, path)
    return ctx


def check(dctx: DistributedContext, single: SessionContext, sql: str, distributed: bool = True) -> pa.Table:
    """Run `sql` through `dctx` and on one node; the answers must be equal, and the query must
    have run as several tasks (`distributed`), or as one in the coordinator."""
    df = dctx.sql(sql)
    got = df.to_arrow_table()
    assert_tables_equal(got, single.sql(sql).to_arrow_table(), sql=sql)
    if distributed:
        assert_ran_distributed(df)
    else:
        assert_ran_on_one_node(df)
    return got


CONFIG = DistributedConfig(embedded_workers=3, partitions_per_task=2)


def cancel_once(df, started: threading.Event) -> list[BaseException]:
    """Collect `df` in a thread and cancel it once `started` is set; returns what the collect
    raised (the thread is done by then)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            df.collect()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(30)
    df.cancel()
    thread.join(30)
    assert not thread.is_alive()
    return errors
