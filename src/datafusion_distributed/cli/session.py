"""One DistributedContext kept across the statements of a command: running each and printing
its result (or its distributed plan), and the tables `--table` and `\\d` deal with.

Results go to standard output; row counts, times and errors to standard error, so a result
piped elsewhere stays a plain table."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from .. import DistributedContext
from ..api.dataframe import format_table
from .formats import DEFAULT_MAXROWS, format_result
from .statements import Statement, split_statements

TABLE_READERS = {".parquet": "register_parquet", ".csv": "register_csv", ".json": "register_json",
                 ".ndjson": "register_json", ".arrow": "register_arrow", ".avro": "register_avro"}  # fmt: skip


class StatementFailed(Exception):
    """A statement of a file (or of standard input) failed: the message says which, and why."""


@dataclass
class ShowOptions:
    """What is shown of each statement; the prompt's toggles change them.

    Attributes:
        timing: add the time a statement took to its row count.
        explain: print the distributed plan of each query instead of running it.
        analyze: run each query and print its plan with metrics instead of its result.
        verbose: with `analyze`, every metric and every task.
        format: the plan format of `explain`: "text", "graphviz" or "mermaid".
        results: how results are printed (see `formats.FORMATS`).
        maxrows: rows a table shows at most (None: all).
    """

    timing: bool = True
    explain: bool = False
    analyze: bool = False
    verbose: bool = False
    format: str = "text"
    results: str = "automatic"
    maxrows: int | None = DEFAULT_MAXROWS


class SqlSession:
    """Runs statements one after another in one DistributedContext, so tables, views and
    settings a statement makes are there for the next ones; prints what each returns.

    Args:
        dctx: the context (and cluster) every statement runs in.
        show: what to print of each statement.
        out, err: where results go, and row counts, times and errors.
    """

    def __init__(
        self,
        dctx: DistributedContext,
        show: ShowOptions,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.dctx = dctx
        self.show = show
        self._out = out
        self._err = err

    @property
    def out(self) -> TextIO:
        """Where results go (standard output unless given: looked up late, as tests swap it)."""
        return self._out or sys.stdout

    @property
    def err(self) -> TextIO:
        """Where row counts, times and errors go."""
        return self._err or sys.stderr

    def run(self, sql: str) -> None:
        """Plan and run one statement and print its result, or its plan when `show` says so.

        Statements that change the session (CREATE ..., SET ...) take effect as they are
        planned, whatever `show` says. KeyboardInterrupt (Ctrl-C) stops a running query."""
        started = time.perf_counter()
        df = self.dctx.sql(sql)
        if not df.schema().names:  # DDL or SET: done as it was planned, with nothing to show
            self._report(0, started)
            return
        if self.show.explain or self.show.analyze:
            print(df.explain_string(self.show.analyze, self.show.verbose, self.show.format), file=self.out)
            return
        table = df.to_arrow_table()
        if table.column_names == ["plan_type", "plan"]:  # EXPLAIN [ANALYZE]: print plans whole
            for row in table.to_pylist():
                print(row["plan"], file=self.out)
        else:
            print(format_result(table, self.show.results, self.show.maxrows), file=self.out)
        self._report(table.num_rows, started)

    def _report(self, rows: int, started: float) -> None:
        timing = f" in {time.perf_counter() - started:.3f}s" if self.show.timing else ""
        print(f"{rows} row(s){timing}", file=self.err, flush=True)

    def run_script(self, text: str, source: str) -> None:
        """Run every statement of `text` in order, stopping at the first that fails.

        Raises:
            StatementFailed: naming `source`, the statement's number and its line."""
        statements = split_statements(text).all_statements()
        for number, statement in enumerate(statements, 1):
            try:
                self.run(statement.sql)
            except Exception as exc:
                where = _where(source, number, statement, len(statements))
                raise StatementFailed(f"{where}{exc}") from exc

    def list_tables(self) -> None:
        """Print the tables and views of every catalog (information_schema left out)."""
        rows = [
            (catalog, schema, table)
            for catalog in sorted(self.dctx.ctx.catalog_names())
            for schema in sorted(self.dctx.ctx.catalog(catalog).schema_names())
            if schema != "information_schema"
            for table in sorted(self.dctx.ctx.catalog(catalog).schema(schema).names())
        ]
        if not rows:
            print("no tables", file=self.err)
            return
        import pyarrow as pa

        columns = list(zip(*rows, strict=True))
        print(
            format_table(pa.table({"catalog": columns[0], "schema": columns[1], "table": columns[2]})),
            file=self.out,
        )

    def describe(self, name: str) -> None:
        """Print the columns of table `name` and their types."""
        import pyarrow as pa

        schema = self.dctx.table(name).schema()
        table = pa.table(
            {
                "column": schema.names,
                "type": [str(f.type) for f in schema],
                "nullable": ["YES" if f.nullable else "NO" for f in schema],
            }
        )
        print(format_table(table), file=self.out)

    def register_table(self, spec: str) -> None:
        """Register `name=path` (a file or a folder of files; the format from the extension)."""
        name, _, path = spec.partition("=")
        if not name or not path:
            raise SystemExit(f"--table must look like name=path, got {spec!r}")
        probe = path.rstrip("/")
        if os.path.isdir(probe):
            exts = {os.path.splitext(f)[1] for f in os.listdir(probe)} & set(TABLE_READERS)
            if len(exts) != 1:
                raise SystemExit(
                    f"cannot tell the format of folder {path!r} (found {sorted(exts) or 'no data files'})"
                )
            ext = exts.pop()
        else:
            ext = os.path.splitext(probe)[1]
        if ext not in TABLE_READERS:
            raise SystemExit(f"unknown table format {ext!r} for {path!r}: use one of {sorted(TABLE_READERS)}")
        if not os.path.exists(probe):
            raise SystemExit(f"table {name!r}: no such file or folder {path!r}")
        options = {"file_extension": ext} if ext == ".ndjson" else {}
        getattr(self.dctx.ctx, TABLE_READERS[ext])(name, path, **options)


def _where(source: str, number: int, statement: Statement, count: int) -> str:
    """`file.sql, statement 2 (line 5): `, or nothing for a lone statement typed as the query."""
    if source == "the query" and count == 1:
        return ""
    return f"{source}, statement {number} (line {statement.line}): "
