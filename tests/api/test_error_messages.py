"""A user's SQL mistake is one QueryFailed with DataFusion's message (and, for a task, the
stage, task and worker), not a chain of the library's frames: once 23 to 37 lines of chained
tracebacks through coordinator/ and runtime/, where plain DataFusion prints 6."""

from __future__ import annotations

import traceback

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, QueryFailed
from datafusion_distributed.errors import said_all
from datafusion_distributed.test_utils.forced import forced_distribution


@pytest.fixture(scope="module")
def dctx():
    ctx = SessionContext()
    table = pa.table({"k": [i % 3 for i in range(60)], "v": list(range(60))})
    ctx.register_record_batches("t", [[batch] for batch in table.to_batches(max_chunksize=20)])
    with DistributedContext(ctx, **forced_distribution()) as dctx:
        yield dctx


def _failure(run) -> QueryFailed:
    with pytest.raises(QueryFailed) as raised:
        run()
    return raised.value


def _printed(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


MISTAKES = {
    "syntax": "SELEC 1",
    "no such column": "SELECT nosuch FROM t",
    "no such table": "SELECT * FROM nosuch",
    "no such file": "SELECT * FROM '/nonexistent/x.parquet'",
}


@pytest.mark.parametrize("sql", MISTAKES.values(), ids=MISTAKES.keys())
def test_a_planning_mistake_is_datafusion_s_message_alone(dctx, sql):
    error = _failure(lambda: dctx.sql(sql).to_pylist())
    assert error.__cause__ is None and "direct cause" not in _printed(error)
    assert "coordinator" not in _printed(error)


def test_an_error_in_a_task_names_where_it_happened_without_a_chain(dctx):
    sql = "SELECT k, sum(v / (v - v)) FROM t GROUP BY k"  # every task divides by zero
    assert dctx.sql(sql).distributed_plan().is_distributed
    error = _failure(lambda: dctx.sql(sql).to_pylist())
    assert "Divide by zero" in str(error) and "stage " in str(error) and "task " in str(error)
    assert error.__cause__ is None and "direct cause" not in _printed(error)
    assert len(_printed(error).splitlines()) < 25


def test_a_bug_of_the_library_keeps_its_chain():
    assert not said_all(KeyError("stage"))
    assert said_all(Exception("DataFusion error: ...")) and said_all(ValueError("Error during planning"))
