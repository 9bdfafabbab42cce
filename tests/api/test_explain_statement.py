"""SQL's EXPLAIN through a DistributedContext shows the distributed plan; DataFusion's own is
one `FORMAT` away. It once returned DataFusion's single-node plan while `explain()`, `EXPLAIN
ANALYZE`, the shell's `\\explain` and `--explain` showed the distributed one."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext
from datafusion_distributed.api.context import Explain
from datafusion_distributed.test_utils.forced import forced_distribution

QUERY = "SELECT column1, count(*) AS n FROM t GROUP BY 1"


@pytest.fixture(scope="module")
def dctx():
    ctx = SessionContext()
    ctx.sql("CREATE TABLE t AS VALUES (1, 2), (3, 4), (1, 5)").collect()
    with DistributedContext(ctx, **forced_distribution()) as dctx:
        yield dctx


def test_explain_shows_the_distributed_plan_without_running_it(dctx):
    rows = dctx.sql(f"EXPLAIN {QUERY}").to_pylist()
    assert [row["plan_type"] for row in rows] == ["distributed_plan"]
    assert rows[0]["plan"] == dctx.sql(QUERY).explain_string()
    assert "Stage 0" in rows[0]["plan"]
    assert dctx.sql(f"explain verbose {QUERY}").to_pylist()[0]["plan"] == dctx.sql(QUERY).explain_string(
        verbose=True
    )


def test_explain_format_is_datafusion_s_own_plan(dctx):
    plan_types = [row["plan_type"] for row in dctx.sql(f"EXPLAIN FORMAT indent {QUERY}").to_pylist()]
    assert plan_types == ["logical_plan", "physical_plan"]


def test_explain_analyze_still_runs_the_query(dctx):
    rows = dctx.sql(f"EXPLAIN ANALYZE {QUERY}").to_pylist()
    assert rows[0]["plan_type"] == "Plan with Metrics" and "output_rows" in rows[0]["plan"]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("EXPLAIN SELECT 1", Explain("SELECT 1", False, False)),
        ("  explain\nverbose SELECT 1", Explain("SELECT 1", False, True)),
        ("EXPLAIN ANALYZE VERBOSE SELECT 1", Explain("SELECT 1", True, True)),
        ("EXPLAIN FORMAT tree SELECT 1", None),
        (
            "EXPLAIN WITH t AS (SELECT 1) SELECT * FROM t",
            Explain("WITH t AS (SELECT 1) SELECT * FROM t", False, False),
        ),
        ("EXPLAIN PREPARE p(INT) AS SELECT $1", None),  # DataFusion plans it without preparing it
        ("EXPLAIN EXECUTE p(1)", None),
        ("SELECT 'EXPLAIN'", None),
    ],
)
def test_which_statements_are_explained(text, parsed):
    assert Explain.parse(text) == parsed


def test_the_command_line_explains_the_distributed_plan(run_cli):
    result = run_cli("sql", "EXPLAIN SELECT x, count(*) FROM (VALUES (1), (2)) v(x) GROUP BY x")
    assert result.returncode == 0, result.stderr
    assert "Stage 0" in result.stdout and "tasks=" in result.stdout


def test_explaining_a_prepare_does_not_prepare_it(dctx):
    """Once, EXPLAIN PREPARE ran the PREPARE, and the next PREPARE of that name failed."""
    dctx.sql("EXPLAIN PREPARE twice(INT) AS SELECT $1 + 1").to_pylist()
    dctx.sql("PREPARE twice(INT) AS SELECT $1 + 1")  # "already exists" when EXPLAIN prepared it
    assert dctx.sql("EXPLAIN EXECUTE twice(1)").to_pylist()[0]["plan_type"] == "logical_plan"  # DataFusion's
    assert list(dctx.sql("EXECUTE twice(1)").to_pylist()[0].values()) == [2]
