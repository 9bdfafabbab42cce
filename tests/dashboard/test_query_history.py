"""The query history: what a context records of each query it runs (text, state, stages, task
attempts, totals, the analysed plan), kept for the last `history_length` finished queries."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, QueryCancelled, QueryTimedOut
from datafusion_distributed.dashboard import views
from datafusion_distributed.dashboard.history import QueryHistory
from datafusion_distributed.events import AdaptiveDecision, Event, EventKind
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query

CONFIG = DistributedConfig(bytes_per_partition=1024, adaptive=False)


@pytest.fixture(scope="module")
def dctx(tpch_sf001):
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    with DistributedContext(ctx, config=CONFIG) as dctx:
        yield dctx


def _only(dctx, query_id: str) -> dict:
    detail = views.query_detail(dctx.engine.history, query_id)
    assert detail is not None
    return detail


def test_a_finished_query_is_recorded_with_its_stages_tasks_and_plan(dctx, single_node_sf001):
    query = tpch_query(3)
    df = dctx.sql(query)
    table = df.to_arrow_table()
    q = _only(dctx, df.metrics.query_id)

    assert q["sql"] == query and q["state"] == "finished" and q["error"] == ""
    assert q["rows"] == table.num_rows == single_node_sf001.sql(query).to_arrow_table().num_rows
    assert q["seconds"] == pytest.approx(df.metrics.seconds)
    stages = {s["stage"]: s for s in q["stages"]}
    assert set(stages) == {s.id for s in df.distributed_plan().stages}
    assert all(s["state"] == "finished" and s["tasks_done"] == s["tasks"] for s in stages.values())
    assert q["stages_done"] == q["stages_total"] == len(stages)
    measured = {(t.stage, t.task): t for sm in df.metrics.stages.values() for t in sm.tasks}
    assert {(t["stage"], t["task"]) for t in q["tasks"]} == set(measured)
    for task in q["tasks"]:
        report = measured[task["stage"], task["task"]]
        assert task["state"] == "finished" and task["worker"] == report.worker
        assert (task["output_rows"], task["output_bytes"]) == (report.rows, report.bytes)
    assert q["bytes_exchanged"] == sum(t.bytes for t in measured.values()) > 0
    assert any("output_rows=" in t["metrics"] for t in q["tasks"])  # DataFusion's metrics per task
    assert q["explain"].startswith(f"Query {df.metrics.query_id}") and "metrics:" in q["explain"]


def test_a_failed_query_keeps_its_error(dctx):
    df = dctx.sql("SELECT CAST(o_comment AS INT) FROM orders")
    with pytest.raises(Exception, match="Cast error") as raised:
        df.to_arrow_table()
    q = views.query_detail(dctx.engine.history, views.queries(dctx.engine.history)[0]["query_id"])
    assert q["state"] == "failed" and "Cast error" in q["error"]
    assert q["error"] in str(raised.value) or str(raised.value) in q["error"]
    final = max(q["stages"], key=lambda s: s["stage"])
    assert final["state"] == "failed" and q["stages_done"] < q["stages_total"]  # not shown as done


def test_a_frame_not_made_from_sql_shows_its_logical_plan(dctx):
    dctx.table("nation").filter("n_regionkey = 1").to_arrow_table()
    q = views.queries(dctx.engine.history)[0]
    assert "Filter: nation.n_regionkey = Int64(1)" in q["sql"] and q["state"] == "finished"


def test_only_the_last_history_length_finished_queries_are_kept(tpch_sf001):
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    with DistributedContext(ctx, config=DistributedConfig(history_length=2)) as dctx:
        for n in range(4):
            dctx.sql(f"SELECT {n} AS n").to_arrow_table()
        assert [q["sql"] for q in views.queries(dctx.engine.history)] == ["SELECT 3 AS n", "SELECT 2 AS n"]
        dctx.sql("SET distributed.history_length = 1")
        assert [q["sql"] for q in views.queries(dctx.engine.history)] == ["SELECT 3 AS n"]


def _events(plan, query_id: str, *events: Event) -> QueryHistory:
    history = QueryHistory(length=1)
    recorder = history.recorder(plan, "SELECT ...")
    recorder.on_event(Event(EventKind.QUERY_STARTED, query_id, tasks=len(plan.stages)))
    for event in events:
        recorder.on_event(event)
    return history


def test_running_queries_are_kept_whatever_the_length(dctx):
    plan = dctx.sql(tpch_query(3)).distributed_plan()
    history = QueryHistory(length=1)
    for n in range(3):
        history.recorder(plan, f"q{n}").on_event(Event(EventKind.QUERY_STARTED, f"q{n}"))
    assert [q["state"] for q in views.queries(history)] == ["running"] * 3
    history.recorder(plan, "").on_event(Event(EventKind.QUERY_FINISHED, "q0"))
    history.recorder(plan, "").on_event(Event(EventKind.QUERY_FINISHED, "q1"))
    assert [q["query_id"] for q in views.queries(history)] == ["q2", "q1"]  # q0 dropped, q2 still runs


@pytest.mark.parametrize(
    ("error", "state"),
    [(QueryCancelled(), "cancelled"), (QueryTimedOut(1.0), "timed out"), (ValueError("boom"), "failed")],
)
def test_how_a_query_ended_is_its_state(dctx, error, state):
    plan = dctx.sql("SELECT 1").distributed_plan()
    history = _events(plan, "q", Event(EventKind.QUERY_FAILED, "q", error=error))
    (q,) = views.queries(history)
    assert q["state"] == state and q["error"] == str(error)


def test_retries_failures_races_and_adaptive_decisions_are_counted(dctx):
    plan = dctx.sql(tpch_query(3)).distributed_plan()
    first = plan.stages[0].id
    other = plan.stages[1].id
    decision = AdaptiveDecision(other, 2, 0, 1024, 10, folded_into=plan.final.id)
    w1, w2 = "grpc://127.0.0.1:1", "grpc://127.0.0.1:2"
    history = _events(
        plan,
        "q",
        Event(EventKind.STAGE_STARTED, "q", stage=first, tasks=2),
        Event(EventKind.TASK_STARTED, "q", stage=first, task=0, attempt=0, worker=w1),
        Event(EventKind.TASK_STARTED, "q", stage=first, task=1, attempt=0, worker=w1),
        Event(
            EventKind.TASK_FAILED, "q", stage=first, task=0, attempt=0, worker=w1, error=RuntimeError("lost")
        ),
        Event(EventKind.WORKER_UNREACHABLE, "q", worker=w1),
        Event(EventKind.TASK_STARTED, "q", stage=first, task=0, attempt=1, worker=w2),
        Event(EventKind.TASK_STARTED, "q", stage=first, task=1, attempt=1, worker=w2),  # a straggler's race
        Event(EventKind.STAGE_ADAPTED, "q", stage=other, tasks=0, metrics=decision),
    )
    q = views.query_detail(history, "q")
    stage = next(s for s in q["stages"] if s["stage"] == first)
    assert (stage["state"], stage["tasks_running"], stage["tasks_retried"], stage["tasks_failed"]) == (
        "running",
        3,
        2,
        1,
    )
    assert q["lost_workers"] == [w1] and w1 in history.lost_workers()
    folded = next(s for s in q["stages"] if s["stage"] == other)
    assert folded["state"] == "folded" and q["decisions"] == [f"stage {other}: {decision.describe()}"]
    assert q["stages_total"] == len(plan.stages) - 1
    failed = next(t for t in q["tasks"] if t["state"] == "failed")
    assert (failed["task"], failed["attempt"], failed["error"]) == (0, 0, "lost")

    recorder = history.recorder(plan, "")
    recorder.on_event(Event(EventKind.STAGE_FINISHED, "q", stage=first))  # the race's loser is stopped
    stage = next(s for s in views.query_detail(history, "q")["stages"] if s["stage"] == first)
    assert (stage["state"], stage["tasks_running"]) == ("finished", 0)
    assert {t["state"] for t in views.query_detail(history, "q")["tasks"]} == {"failed", "stopped"}


def test_the_plan_text_is_made_when_first_asked_for(dctx):
    df = dctx.sql("SELECT 1 AS one")
    df.to_arrow_table()
    history = dctx.engine.history
    query_id = df.metrics.query_id
    assert history.query(query_id, lambda q: (q.explain, q.plan is not None)) == (None, True)
    text = history.explain(query_id)
    assert text.startswith(f"Query {query_id}")
    assert history.query(query_id, lambda q: (q.explain, q.plan)) == (text, None)  # the plan is let go


def test_the_tables_of_a_fresh_context_are_empty_with_their_columns():
    with DistributedContext(SessionContext()) as dctx:
        table = dctx.sql("SELECT * FROM distributed.queries").to_arrow_table()
        assert table.num_rows == 0 and "sql" in table.column_names
        assert pa.types.is_timestamp(table.schema.field("started").type)
