"""Randomised queries over random tables: distributed (cut into stages, run in process) must
answer exactly like single-node DataFusion.

Hypothesis builds two or three small tables with nulls, each written as several Parquet files,
and a query over them: filters, joins of every outer type, aggregates with or without groups,
unions, ORDER BY with LIMIT. Runs are bounded by the hypothesis profile in conftest.py ("ci":
25 examples); `HYPOTHESIS_PROFILE=thorough` searches harder.

Queries without an aggregate always end with an ORDER BY over every column: that makes LIMIT
deterministic. A table may appear twice (a self-join: repeated column names and identical
subtrees), CROSS JOINs often exchange zero-column rows, and a UNION of two aggregates makes an
InterleaveExec over shuffles.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, note, reject
from hypothesis import strategies as st

from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.execution_plans import display_distributed_plan
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.local_check import plan_distributed, planning_context, run_distributed

TABLES = ("t0", "t1", "t2")
COLUMNS = ("k", "g", "v", "w")  # table t<i> names them k<i>, g<i>, v<i>, w<i>


@dataclass(frozen=True)
class Table:
    rows: tuple[tuple, ...]  # (k, g, v, w)
    files: int


def _nullable(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.none(), values) | values  # about a third null


row = st.tuples(
    _nullable(st.integers(0, 8)),  # k: join key, few values so joins match
    _nullable(st.sampled_from(["a", "b", "c", "d"])),  # g: group
    _nullable(st.integers(-50, 50)),  # v: integer measure
    _nullable(st.floats(0, 1000, allow_nan=False).map(lambda f: round(f, 2))),  # w: float measure
)
tables = st.builds(Table, st.lists(row, max_size=40).map(tuple), st.integers(1, 4))


def write_table(table: Table, index: int, folder: Path) -> None:
    folder.mkdir()
    columns = list(zip(*table.rows, strict=True)) if table.rows else [[], [], [], []]
    types = (pa.int64(), pa.string(), pa.int64(), pa.float64())
    data = pa.table({f"{c}{index}": pa.array(v, t) for c, v, t in zip(COLUMNS, columns, types, strict=True)})
    step = max(1, -(-data.num_rows // table.files))
    for f in range(table.files):
        pq.write_table(data.slice(f * step, step), folder / f"part-{f}.parquet")


def col(source: tuple[str, int], column: str) -> str:
    """Column `column` (k, g, v or w) of the table behind (alias, table index)."""
    alias, index = source
    return f"{alias}.{column}{index}"


@st.composite
def predicates(draw, source: tuple[str, int]) -> str:
    k, g, v, w = (col(source, c) for c in COLUMNS)
    return draw(
        st.sampled_from(
            [
                f"{v} > {draw(st.integers(-30, 30))}",
                f"{g} IS NOT NULL",
                f"{g} IN ('a', 'c')",
                f"{k} % 3 = {draw(st.integers(0, 2))}",
                f"{w} < {draw(st.integers(0, 1000))}",
                f"({v} IS NULL OR {w} > 100)",
            ]
        )
    )


@st.composite
def from_clauses(draw) -> tuple[str, list[tuple[str, int]]]:
    """A FROM clause joining one to three tables (possibly one table twice), and the
    (alias, table index) it exposes."""
    count = draw(st.integers(1, 3))
    tables = draw(st.lists(st.integers(0, len(TABLES) - 1), min_size=count, max_size=count))
    sources = [(f"x{i}", t) for i, t in enumerate(tables)]
    clause = f"{TABLES[tables[0]]} x0"
    visible = [sources[0]]
    for i in range(1, count):
        kind = draw(
            st.sampled_from(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS", "SEMI", "ANTI"])
        )
        left = draw(st.sampled_from(visible))
        table = TABLES[tables[i]]
        if kind == "CROSS":
            clause += f" CROSS JOIN {table} x{i}"
            visible.append(sources[i])
        elif kind in ("SEMI", "ANTI"):
            # Becomes a WHERE [NOT] EXISTS below: the table is not visible to the select list.
            clause += f" /*{kind}:{table}:{col(left, 'k')}:{col(('s', tables[i]), 'k')}*/"
        else:
            extra = f" AND {draw(predicates(sources[i]))}" if draw(st.booleans()) else ""
            clause += f" {kind} {table} x{i} ON {col(left, 'k')} = {col(sources[i], 'k')}{extra}"
            visible.append(sources[i])
    return clause, visible


@st.composite
def select_queries(draw) -> tuple[str, bool]:
    """One SELECT, and whether it aggregates."""
    clause, visible = draw(from_clauses())
    conditions = []
    for kind, name, outer, inner in re.findall(r" /\*(SEMI|ANTI):(\w+):([\w.]+):([\w.]+)\*/", clause):
        negate = "NOT " if kind == "ANTI" else ""
        conditions.append(f"{negate}EXISTS (SELECT 1 FROM {name} s WHERE {inner} = {outer})")
    clause = re.sub(r" /\*[^*]*\*/", "", clause)
    if draw(st.booleans()):
        conditions.append(draw(predicates(draw(st.sampled_from(visible)))))
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    source = draw(st.sampled_from(visible))
    if draw(st.booleans()):  # aggregate
        keys = draw(
            st.lists(
                st.sampled_from([col(s, c) for s in visible for c in ("g", "k")]), max_size=2, unique=True
            )
        )
        aggregates = draw(
            st.lists(
                st.sampled_from(
                    [
                        "count(*)",
                        f"sum({col(source, 'v')})",
                        f"min({col(source, 'k')})",
                        f"max({col(source, 'g')})",
                        f"count(DISTINCT {col(source, 'g')})",
                        # rounded: a float sum depends on the order its rows are added in,
                        # which partitioning changes (in single-node DataFusion too), and a
                        # UNION with a string column compares it as text
                        f"round(avg({col(source, 'w')}), 6)",
                        f"count({col(source, 'w')})",
                    ]
                ),
                min_size=1,
                max_size=3,
                unique=True,
            )
        )
        items = [f"{k} AS c{i}" for i, k in enumerate(keys)]
        items += [f"{a} AS c{len(keys) + i}" for i, a in enumerate(aggregates)]
        group = f" GROUP BY {', '.join(keys)}" if keys else ""
        having = f" HAVING count(*) > {draw(st.integers(0, 3))}" if keys and draw(st.booleans()) else ""
        return f"SELECT {', '.join(items)} FROM {clause}{where}{group}{having}", True
    columns = draw(
        st.lists(
            st.sampled_from([col(s, c) for s in visible for c in COLUMNS]),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    distinct = "DISTINCT " if draw(st.booleans()) else ""
    items = ", ".join(f"{c} AS c{i}" for i, c in enumerate(columns))
    return f"SELECT {distinct}{items} FROM {clause}{where}", False


@st.composite
def queries(draw) -> str:
    sql, _ = draw(select_queries())
    width = sql.count(" AS c")
    if draw(st.integers(0, 3)) == 0:  # a union of two selects of the same width
        other, _ = draw(select_queries())
        if other.count(" AS c") == width:
            sql = f"{sql} {draw(st.sampled_from(['UNION', 'UNION ALL']))} {other}"
    if draw(st.booleans()):
        sql += " ORDER BY " + ", ".join(f"{i + 1}" for i in range(width))
        if draw(st.booleans()):
            sql += f" LIMIT {draw(st.integers(0, 15))}"
            if draw(st.booleans()):
                sql += f" OFFSET {draw(st.integers(1, 5))}"
    return sql


configs = st.builds(
    QueryPlanConfig,
    workers=st.integers(1, 3),
    partitions_per_task=st.integers(1, 2),
    bytes_per_partition=st.just(1),
    broadcast_inline_bytes=st.sampled_from([0, 8 * 1024 * 1024]),
    broadcast_total_rows=st.none(),
)


@given(data=st.tuples(tables, tables, tables), sql=queries(), config=configs)
def test_random_queries_match_single_node(data, sql, config):
    note(sql)
    with tempfile.TemporaryDirectory(prefix="planner-properties-") as folder:
        for index, (name, table) in enumerate(zip(TABLES, data, strict=True)):
            write_table(table, index, Path(folder) / name)

        def register(ctx):
            for name in TABLES:
                ctx.register_parquet(name, str(Path(folder) / name))

        ctx = planning_context(config, register)
        try:
            ctx.sql(sql).execution_plan()
        except Exception as exc:  # DataFusion itself cannot plan it: nothing to compare
            note(f"single-node planning failed: {exc}")
            reject()
        plan = plan_distributed(ctx, sql, config)
        note(display_distributed_plan(plan))
        expected = ctx.sql(sql).to_arrow_table()
        actual = run_distributed(plan, expected.schema, timeout=60)
        assert_tables_equal(actual, expected, sql=sql)
        if plan.is_distributed:  # a random plan may be one stage of one task: then said so
            assert_ran_distributed(plan)
        else:
            assert_ran_on_one_node(plan)
