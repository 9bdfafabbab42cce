"""What a task's inputs carry over the wire: never the rows of a memory table shipped once.

A consumer task reads an earlier stage's outputs from files; it needs the boundary node only to
run a coalesce or merge over its input scan. The earlier stage's subtree (and any memory table
inside it) travels only when the exchange is empty and the subtree runs in its place, and then
with its shipped tables read from their files rather than inline.
"""

from __future__ import annotations

import pytest
from datafusion import SessionContext, col
from datafusion import functions as f

from datafusion_distributed import DistributedContext
from datafusion_distributed.codec import fields as F
from datafusion_distributed.codec.children import kind
from datafusion_distributed.coordinator.run_state import RunState
from datafusion_distributed.distributed_planner.build_stages import input_marker
from datafusion_distributed.protocol.messages import TaskInput, encode
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import forced_distribution

ROWS = 100_000  # about 1.6 MiB: shipped once below, as a 3M-row cache() is by default
SERIES = f"SELECT x, x % 7 AS k, x * 0.5 AS v FROM generate_series(1, {ROWS}) AS t(x)"
SHIPPED = forced_distribution(memory_table_inline_bytes=64 * 1024)
# an empty exchange is replaced by its subtree only when it is read from files (a stream of no
# rows needs nothing in its place)
SHIPPED_SPOOLED = forced_distribution(memory_table_inline_bytes=64 * 1024, exchange="spool")
MAX_INPUT_BYTES = 64 * 1024  # an input's message: boundary nodes and file names, no table rows

QUERIES = {
    "shuffle": "SELECT k, count(*) AS n, sum(v) AS s FROM cached GROUP BY k",
    "coalesce": "SELECT count(*) AS n, sum(v) AS s FROM cached",
    "merge": "SELECT x, v FROM cached ORDER BY v DESC LIMIT 5",
    "empty shuffle": "SELECT k, count(*) AS n FROM cached WHERE v < 0 GROUP BY k",
    "empty coalesce": "SELECT x, v FROM cached WHERE v < 0 LIMIT 5",
    "empty merge": "SELECT x, v FROM cached WHERE v < 0 ORDER BY v",
    # the middle stage runs on a worker, which reads the empty input's table from its files
    "empty shuffle on a worker": """
        SELECT n, count(*) AS c FROM (SELECT k, count(*) AS n FROM cached WHERE v < 0 GROUP BY k)
        GROUP BY n""",
}


@pytest.fixture
def sent(monkeypatch) -> list[tuple[RunState, TaskInput]]:
    """Every task input the coordinator builds (for workers and for the head stage)."""
    seen: list[tuple[RunState, TaskInput]] = []
    original = RunState.task_inputs

    def recording(self: RunState, stage, task) -> tuple[TaskInput, ...]:
        inputs = original(self, stage, task)
        seen.extend((self, inp) for inp in inputs)
        return inputs

    monkeypatch.setattr(RunState, "task_inputs", recording)
    return seen


def cached(ctx: SessionContext) -> SessionContext:
    """`ctx` with the table `cached`: a cache() of the series, a memory table."""
    ctx.register_view("cached", ctx.sql(SERIES).cache())
    return ctx


def assert_no_table_rows(sent: list[tuple[RunState, TaskInput]]) -> None:
    """No input carries a shipped table's scan, and each is small."""
    assert sent, "no task input was built: the query did not run distributed"
    for run, inp in sent:
        tables = run.plan.tables
        assert tables, "the memory table was not shipped"
        carried = [t.id for t in tables if t.scan in inp.boundary or t.scan in inp.boundary_child]
        assert not carried, f"a {inp.kind} input carries the rows of shipped tables {carried}"
        size = len(encode(inp))
        assert size < MAX_INPUT_BYTES, f"a {inp.kind} input of {size} bytes"


@pytest.mark.parametrize("name", list(QUERIES))
def test_inputs_carry_no_table_rows(name: str, sent) -> None:
    query = QUERIES[name]
    single = cached(SessionContext())
    shipped = SHIPPED_SPOOLED if name.startswith("empty") else SHIPPED
    with DistributedContext(cached(SessionContext()), **shipped) as dctx:
        df = dctx.sql(query)
        assert "shipped once" in df.explain_string()
        got = df.to_arrow_table()
    assert_tables_equal(got, single.sql(query).to_arrow_table(), sql=query)
    assert_ran_distributed(dctx)
    assert_no_table_rows(sent)
    if name.startswith("empty"):  # its subtree ran in its place, reading nothing, not the table
        empty = [(run, inp) for run, inp in sent if inp.groups is None]
        assert empty, "the exchange was not empty"
        for run, inp in empty:
            assert kind(inp.boundary) == F.LOCAL_LIMIT, "the subtree does not run under a limit of no row"
            assert not any(input_marker(t.id) in inp.boundary for t in run.plan.tables)


def test_cache_then_aggregate_as_in_the_issue(sent) -> None:
    """The issue's query, at a size that runs quickly: a DataFrame cached, then aggregated."""
    ctx = SessionContext()
    expected = ctx.sql(SERIES).cache().aggregate([col("k")], [f.count_star()]).to_arrow_table()
    with DistributedContext(ctx, **SHIPPED) as dctx:
        got = dctx.sql(SERIES).cache().aggregate([col("k")], [f.count_star()]).to_arrow_table()
    assert_tables_equal(got, expected)
    assert_ran_distributed(dctx)
    assert_no_table_rows(sent)
