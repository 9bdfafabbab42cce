"""A seeded generator of SQL over the tables of `tables`, as a structure that shrinks.

A `Query` is one SELECT (joins of every kind, filters with subqueries, aggregates, windows,
DISTINCT, ORDER BY with LIMIT) or a set operation of two; each part is a list, so
`Query.smaller()` yields the same query with one part taken away or made plainer, which is
how a failing query is shrunk to a minimal one. Every query orders its output completely when
it has a LIMIT, so that its rows are defined; what the generator cannot make deterministic
(window functions over ties, float aggregates) the runner recognises by running single-node
DataFusion in several ways.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from .tables import COLUMNS, TABLES

Column = tuple[str, str, str]  # (qualifier, name, kind)

_NUMERIC = ("int", "float", "decimal")
_LITERALS = {
    "int": ["0", "1", "3", "-1", "1000", "NULL"],
    "float": ["0.0", "-0.0", "1.5", "'NaN'::DOUBLE", "-2.25", "NULL"],
    "decimal": ["0", "12.50", "-0.01", "9999999999.99", "NULL"],
    "string": ["''", "'a'", "'ab'", "'ß'", "'🦆'", "'zz'", "NULL"],
    "date": ["DATE '2020-01-01'", "DATE '2019-06-30'", "NULL"],
    "bool": ["TRUE", "FALSE", "NULL"],
}
_JOINS = [
    "JOIN",
    "LEFT JOIN",
    "RIGHT JOIN",
    "FULL JOIN",
    "LEFT SEMI JOIN",
    "LEFT ANTI JOIN",
    "RIGHT SEMI JOIN",
    "RIGHT ANTI JOIN",
    "CROSS JOIN",
]


@dataclass(frozen=True)
class Source:
    """A FROM clause, the columns it gives, and plainer FROM clauses that give a subset."""

    sql: str
    scope: tuple[Column, ...]
    plainer: tuple[Source, ...] = ()


@dataclass(frozen=True)
class Query:
    """One SELECT, or `left` `set_op` `right` when `set_op` is set."""

    select: tuple[str, ...] = ()
    source: Source | None = None
    where: tuple[str, ...] = ()
    group_by: tuple[str, ...] = ()
    having: tuple[str, ...] = ()
    distinct: bool = False
    order_all: bool = False  # ORDER BY every output column, by position
    limit: int | None = None
    offset: int | None = None
    set_op: str = ""
    left: Query | None = None
    right: Query | None = None

    def sql(self) -> str:
        """The query's SQL text."""
        if self.set_op:
            body = f"({self.left.sql()}) {self.set_op} ({self.right.sql()})"
            width = len(self.left.select)
        else:
            head = "SELECT DISTINCT " if self.distinct else "SELECT "
            body = head + ", ".join(f"{e} AS c{i}" for i, e in enumerate(self.select))
            body += f" FROM {self.source.sql}"
            if self.where:
                body += " WHERE " + " AND ".join(f"({w})" for w in self.where)
            if self.group_by:
                body += " GROUP BY " + ", ".join(self.group_by)
            if self.having:
                body += " HAVING " + " AND ".join(f"({h})" for h in self.having)
            width = len(self.select)
        if self.order_all:
            body += " ORDER BY " + ", ".join(str(i + 1) for i in range(width))
        if self.limit is not None:
            body += f" LIMIT {self.limit}"
        if self.offset is not None:
            body += f" OFFSET {self.offset}"
        return body

    def smaller(self) -> Iterator[Query]:
        """The query with one part removed or made plainer (for shrinking)."""
        replace = dataclasses.replace
        if self.set_op:
            yield replace(self.left, order_all=self.order_all, limit=self.limit, offset=self.offset)
            yield replace(self.right, order_all=self.order_all, limit=self.limit, offset=self.offset)
            for smaller in self.left.smaller():
                if len(smaller.select) == len(self.left.select):
                    yield replace(self, left=smaller)
            for smaller in self.right.smaller():
                if len(smaller.select) == len(self.right.select):
                    yield replace(self, right=smaller)
        else:
            if not self.group_by and len(self.select) > 1:
                for i in range(len(self.select)):
                    yield replace(self, select=self.select[:i] + self.select[i + 1 :])
            for name in ("where", "having"):
                parts = getattr(self, name)
                for i in range(len(parts)):
                    yield replace(self, **{name: parts[:i] + parts[i + 1 :]})
            if self.distinct:
                yield replace(self, distinct=False)
            for plainer in self.source.plainer:
                if _covers(plainer, self):
                    yield replace(self, source=plainer)
        if self.offset is not None:
            yield replace(self, offset=None)
        if self.limit is not None:
            yield replace(self, limit=None, offset=None)
        if self.order_all and self.limit is None:
            yield replace(self, order_all=False)


def _covers(source: Source, query: Query) -> bool:
    """Whether every column `query` names is in `source`'s scope (a rough textual check)."""
    text = " ".join((*query.select, *query.where, *query.group_by, *query.having))
    qualifiers = {q for q, _, _ in source.scope}
    named = {word.split(".")[0] for word in text.replace("(", " ").replace(",", " ").split() if "." in word}
    return {n for n in named if len(n) == 1} - {"x"} <= qualifiers  # x: a subquery's own table


@dataclass
class QueryGenerator:
    """Makes queries from a seed: `QueryGenerator(seed).query()`."""

    seed: int
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- whole queries ------------------------------------------------------------------------
    def query(self) -> Query:
        """A new query."""
        roll = self.rng.random()
        if roll < 0.15:
            return self._set_operation()
        query = self._aggregate() if roll < 0.5 else self._projection()
        return self._ordered(query)

    def _ordered(self, query: Query) -> Query:
        if self.rng.random() < 0.35:
            limit = self.rng.choice([0, 1, 3, 10])
            offset = self.rng.choice([None, None, 2])
            return dataclasses.replace(query, order_all=True, limit=limit, offset=offset)
        return dataclasses.replace(query, order_all=self.rng.random() < 0.3)

    def _projection(self) -> Query:
        source = self._source()
        select = [self._expr(source.scope) for _ in range(self.rng.randint(1, 4))]
        if self.rng.random() < 0.35:
            select.append(self._window(source.scope))
        return Query(
            select=tuple(select),
            source=source,
            where=self._where(source.scope),
            distinct=self.rng.random() < 0.15,
        )

    def _aggregate(self) -> Query:
        source = self._source()
        keys = [self._column(source.scope) for _ in range(self.rng.randint(0, 2))]
        keys = list(dict.fromkeys(f"{q}.{n}" for q, n, _ in keys))
        aggregates = [self._aggregate_call(source.scope) for _ in range(self.rng.randint(1, 3))]
        having = ()
        if keys and self.rng.random() < 0.3:
            having = (f"count(*) {self.rng.choice(['>', '>=', '<'])} {self.rng.choice([1, 2, 5])}",)
        return Query(
            select=tuple(keys + aggregates),
            source=source,
            where=self._where(source.scope),
            group_by=tuple(keys),
            having=having,
        )

    def _set_operation(self) -> Query:
        kinds = [self.rng.choice(list(COLUMNS.values())) for _ in range(self.rng.randint(1, 3))]
        sides = []
        for _ in range(2):
            source = self._table_source(self.rng.choice(TABLES), self.rng.choice("abc"))
            select = tuple(self._expr_of(kind, source.scope) for kind in kinds)
            sides.append(
                Query(select=select, source=source, where=self._where(source.scope, subqueries=False))
            )
        op = self.rng.choice(["UNION ALL", "UNION", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"])
        return self._ordered(Query(set_op=op, left=sides[0], right=sides[1], select=sides[0].select))

    # -- FROM ---------------------------------------------------------------------------------
    def _table_source(self, table: str, alias: str) -> Source:
        return Source(f"{table} {alias}", tuple((alias, name, kind) for name, kind in COLUMNS.items()))

    def _source(self) -> Source:
        roll = self.rng.random()
        a = self._table_source(self.rng.choice(TABLES), "a")
        if roll < 0.35:
            return a
        if roll < 0.45:
            return self._derived("a")
        b = self._table_source(self.rng.choice(TABLES), "b")
        joined = self._join(a, b)
        if self.rng.random() < 0.2:
            c = self._table_source(self.rng.choice(TABLES), "c")
            return self._join(joined, c, plainer=(joined,))
        return joined

    def _derived(self, alias: str) -> Source:
        table = self.rng.choice(TABLES)
        inner = f"SELECT k, count(*) AS n, sum(f) AS sf, max(s) AS ms FROM {table} GROUP BY k"
        scope = ((alias, "k", "int"), (alias, "n", "int"), (alias, "sf", "float"), (alias, "ms", "string"))
        return Source(f"({inner}) {alias}", scope, (self._table_source(table, alias),))

    def _join(self, left: Source, right: Source, plainer: tuple[Source, ...] = ()) -> Source:
        # a third table joins on keys only: three tables crossed make too many rows to sort
        join = self.rng.choice(_JOINS if not plainer else _JOINS[:-1])
        r = right.scope[0][0]
        if join == "CROSS JOIN":
            sql = f"{left.sql} CROSS JOIN {right.sql}"
        else:
            lq = self.rng.choice(sorted({q for q, _, _ in left.scope}))
            roll = self.rng.random() * (0.8 if plainer else 1.0)
            if roll < 0.6:
                on = f"{lq}.k = {r}.k"
                if self.rng.random() < 0.3:
                    on += f" AND {lq}.f < {r}.f"
            elif roll < 0.8:
                on = f"{lq}.s = {r}.s"
            else:
                on = f"{lq}.id < {r}.id + {self.rng.choice([0, 5, 600])}"
            sql = f"{left.sql} {join} {right.sql} ON {on}"
        if join.startswith("LEFT SEMI") or join.startswith("LEFT ANTI"):
            scope = left.scope
        elif join.startswith("RIGHT SEMI") or join.startswith("RIGHT ANTI"):
            scope = right.scope
        else:
            scope = left.scope + right.scope
        keeps_left = not join.startswith("RIGHT SEMI") and not join.startswith("RIGHT ANTI")
        return Source(sql, scope, plainer or ((left,) if keeps_left else (right,)))

    # -- expressions --------------------------------------------------------------------------
    def _column(self, scope: tuple[Column, ...], kinds: tuple[str, ...] | None = None) -> Column:
        choices = [c for c in scope if kinds is None or c[2] in kinds] or list(scope)
        return self.rng.choice(choices)

    def _expr(self, scope: tuple[Column, ...]) -> str:
        return self._expr_of(self.rng.choice([c[2] for c in scope]), scope)

    def _expr_of(self, kind: str, scope: tuple[Column, ...]) -> str:
        """An expression of `kind` over `scope` (a literal of the kind when none is there)."""
        columns = [c for c in scope if c[2] == kind]
        if not columns:
            return f"CAST({self.rng.choice(_LITERALS[kind][:-1])} AS {_SQL_TYPE[kind]})"
        q, name, _ = self.rng.choice(columns)
        col = f"{q}.{name}"
        roll = self.rng.random()
        if roll < 0.5:
            return col
        forms = {
            "int": [f"{col} + 1", f"{col} * 2", f"abs({col})", f"coalesce({col}, 0)", f"{col} % 3"],
            "float": [f"{col} * 1.5", f"round({col}, 1)", f"coalesce({col}, -1.0)", f"-{col}", f"abs({col})"],
            "decimal": [f"{col} + 1", f"{col} * 2", f"-{col}", f"coalesce({col}, 0)"],
            "string": [
                f"upper({col})",
                f"concat({col}, 'x')",
                f"substr({col}, 1, 1)",
                f"coalesce({col}, '?')",
            ],
            "date": [f"{col} + INTERVAL '1 day'", f"coalesce({col}, DATE '2000-01-01')"],
            "bool": [f"NOT {col}", f"coalesce({col}, FALSE)"],
        }[kind]
        if roll < 0.9:
            return self.rng.choice(forms)
        return (
            f"CASE WHEN {self._predicate(scope, subqueries=False)} THEN {col} ELSE {_LITERALS[kind][-1]} END"
        )

    def _predicate(self, scope: tuple[Column, ...], subqueries: bool = True) -> str:
        q, name, kind = self._column(scope)
        col = f"{q}.{name}"
        roll = self.rng.random()
        literal = self.rng.choice(_LITERALS[kind][:-1])
        if subqueries and roll < 0.2:
            return self._subquery_predicate(scope)
        if roll < 0.55:
            return f"{col} {self.rng.choice(['=', '<>', '<', '>=', '<='])} {literal}"
        if roll < 0.65:
            return f"{col} IS {self.rng.choice(['', 'NOT '])}NULL"
        if roll < 0.75:
            return f"{col} IN ({literal}, {self.rng.choice(_LITERALS[kind])})"
        if roll < 0.85 and kind == "string":
            return f"{col} LIKE '{self.rng.choice(['a%', '%b', '_', '%'])}'"
        if roll < 0.92:
            other = self._column(scope, (kind,))
            return f"{col} {self.rng.choice(['=', '<', '<>'])} {other[0]}.{other[1]}"
        return f"NOT ({col} {self.rng.choice(['=', '>'])} {literal}) OR {col} IS NULL"

    def _subquery_predicate(self, scope: tuple[Column, ...]) -> str:
        table = self.rng.choice(TABLES)
        q, name, kind = self._column(scope, ("int", "float", "string"))
        col = f"{q}.{name}"
        roll = self.rng.random()
        if roll < 0.35:
            negated = self.rng.choice(["", "NOT "])
            return f"{col} {negated}IN (SELECT x.{name} FROM {table} x WHERE x.id > {self.rng.choice([0, 500, 1500])})"
        if roll < 0.7:
            negated = self.rng.choice(["", "NOT "])
            return f"{negated}EXISTS (SELECT 1 FROM {table} x WHERE x.{name} = {col})"
        agg = "avg" if kind in _NUMERIC else "max"
        return f"{col} {self.rng.choice(['>', '<=', '='])} (SELECT {agg}(x.{name}) FROM {table} x)"

    def _where(self, scope: tuple[Column, ...], subqueries: bool = True) -> tuple[str, ...]:
        return tuple(self._predicate(scope, subqueries) for _ in range(self.rng.choice([0, 0, 1, 1, 2])))

    def _aggregate_call(self, scope: tuple[Column, ...]) -> str:
        q, name, kind = self._column(scope)
        col = f"{q}.{name}"
        calls = ["count(*)", f"count({col})", f"count(DISTINCT {col})", f"min({col})", f"max({col})"]
        if kind in _NUMERIC:
            calls += [f"sum({col})", f"avg({col})", f"median({col})"]
        if kind == "float":
            calls += [f"stddev({col})", f"var_pop({col})"]
        if kind == "string":
            calls += [f"string_agg({col}, ',' ORDER BY {col})", f"array_agg({col} ORDER BY {col})"]
        if kind == "bool":
            calls += [f"bool_and({col})", f"bool_or({col})"]
        if kind == "int":
            calls += [
                f"array_agg(DISTINCT {col} ORDER BY {col})",
                f"first_value({col} ORDER BY {col} DESC NULLS LAST)",
            ]
        call = self.rng.choice(calls)
        if self.rng.random() < 0.1 and not call.startswith("count(*)"):
            call += f" FILTER (WHERE {self._predicate(scope, subqueries=False)})"
        return call

    def _window(self, scope: tuple[Column, ...]) -> str:
        q, name, kind = self._column(scope)
        col = f"{q}.{name}"
        keys = sorted({f"{c[0]}.{c[1]}" for c in scope if c[2] in ("int", "string")})
        partition = self.rng.choice(keys) if keys else col
        # ordered by every column of one table, so that only rows equal in all of them tie
        order = ", ".join(f"{c[0]}.{c[1]}" for c in scope if c[2] != "float")
        functions = [
            "row_number()",
            "rank()",
            "dense_rank()",
            f"count({col})",
            f"lag({col})",
            f"lead({col}, 2)",
        ]
        if kind in ("int", "decimal"):
            functions += [f"sum({col})", f"min({col})"]
        function = self.rng.choice(functions)
        frame = ""
        if function.startswith(("sum", "min", "count")) and self.rng.random() < 0.5:
            frame = " ROWS BETWEEN 1 PRECEDING AND CURRENT ROW"
        if self.rng.random() < 0.2:
            return (
                f"{function} OVER ()"
                if function.startswith(("count", "sum", "min"))
                else f"{function} OVER (ORDER BY {order})"
            )
        return f"{function} OVER (PARTITION BY {partition} ORDER BY {order}{frame})"


_SQL_TYPE = {
    "int": "BIGINT",
    "float": "DOUBLE",
    "decimal": "DECIMAL(12, 2)",
    "string": "VARCHAR",
    "date": "DATE",
    "bool": "BOOLEAN",
}
