"""The query history in SQL: `distributed.queries`, `.stages`, `.tasks` and `.workers` through
`dctx.sql`, snapshots that leave the user's SessionContext as it was; and the workers' state."""

from __future__ import annotations

import socket

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.dashboard.workers import WorkerStatus
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query


@pytest.fixture(scope="module")
def dctx(tpch_sf001):
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    with DistributedContext(ctx, config=DistributedConfig(bytes_per_partition=1024)) as dctx:
        yield dctx


def test_the_queries_stages_and_tasks_tables_answer_what_ran(dctx, single_node_sf001):
    df = dctx.sql(tpch_query(18))
    rows = df.to_arrow_table().num_rows
    query_id = df.metrics.query_id

    (query,) = dctx.sql(
        f"SELECT sql, state, rows, stages_done, stages_total, bytes_exchanged, seconds, ended >= started AS ordered "
        f"FROM distributed.queries WHERE query_id = '{query_id}'"
    ).to_pylist()
    assert query["sql"] == tpch_query(18) and query["state"] == "finished" and query["ordered"]
    assert query["rows"] == rows == single_node_sf001.sql(tpch_query(18)).to_arrow_table().num_rows
    assert query["stages_done"] == query["stages_total"] > 1
    assert query["seconds"] == pytest.approx(df.metrics.seconds)

    tasks = dctx.sql(
        f"SELECT stage, task, worker, output_rows, output_bytes FROM distributed.tasks "
        f"WHERE query_id = '{query_id}' AND state = 'finished' ORDER BY stage, task"
    ).to_pylist()
    measured = sorted(
        (t.stage, t.task, t.worker, t.rows, t.bytes) for s in df.metrics.stages.values() for t in s.tasks
    )
    assert [tuple(t.values()) for t in tasks] == measured
    assert query["bytes_exchanged"] == sum(t[4] for t in measured)

    joined = dctx.sql(
        "SELECT q.query_id, sum(s.tasks_done) AS done FROM distributed.queries q "
        "JOIN distributed.stages s ON s.query_id = q.query_id "
        f"WHERE q.query_id = '{query_id}' GROUP BY q.query_id"
    ).to_pylist()
    assert joined == [{"query_id": query_id, "done": len(measured)}]


def test_the_workers_table_has_each_worker_and_its_load(dctx):
    workers = dctx.sql(
        "SELECT url, health, running_tasks, spool_bytes, memory_bytes, in_process FROM distributed.workers"
    )
    rows = sorted(workers.to_pylist(), key=lambda r: r["url"])
    assert [r["url"] for r in rows] == sorted(dctx.workers())
    assert all(r["health"] == "ok" and r["running_tasks"] == 0 and r["memory_bytes"] > 0 for r in rows)
    # the embedded cluster's workers share this process, and its memory: the table says so
    assert all(r["in_process"] for r in rows)
    assert all(r["spool_bytes"] is not None for r in rows)


def test_the_users_context_is_left_as_it_was(dctx):
    dctx.sql("SELECT count(*) FROM distributed.queries").to_arrow_table()
    assert "distributed" not in dctx.ctx.catalog().schema_names()
    with pytest.raises(Exception, match="distributed"):
        dctx.ctx.sql("SELECT * FROM distributed.queries").collect()


def test_a_worker_that_does_not_answer_shows_so(dctx):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"grpc://127.0.0.1:{s.getsockname()[1]}"
    engine = dctx.engine
    status = WorkerStatus(
        lambda: [*dctx.workers(), closed], engine.clients, engine.liveness, engine.history, 5.0
    )
    states = {s.url: s for s in status.states()}
    assert states[closed].health in ("unreachable", "not answering") and states[closed].memory_bytes is None
    assert all(states[url].health == "ok" for url in dctx.workers())


def test_a_schema_of_the_users_named_distributed_is_theirs():
    ctx = SessionContext()
    ctx.sql("CREATE SCHEMA distributed").collect()
    ctx.sql("CREATE TABLE distributed.queries AS VALUES ('mine')").collect()
    with DistributedContext(ctx) as own:
        assert own.sql("SELECT * FROM distributed.queries").to_pylist() == [{"column1": "mine"}]
