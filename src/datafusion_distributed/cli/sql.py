"""The `sql` command: run statements distributed, from the command line, files, standard input
or an interactive prompt, in one DistributedContext (one cluster) for all of them.

    datafusion-distributed sql "SELECT ..." --workers grpc://h1:50051,grpc://h2:50051 \\
        --table lineitem=data/lineitem/ [--explain]
    datafusion-distributed sql -f setup.sql -f report.sql
    datafusion-distributed sql                  # a prompt on a terminal; else statements from stdin
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import DistributedContext
from ..protocol.resolver import WORKERS_ENV, EnvResolver
from .formats import DEFAULT_MAXROWS, FORMATS, parse_maxrows
from .session import ShowOptions, SqlSession
from .settings import add_setting_flags, config_from_args
from .shell import Shell, history_path


def _workers(args: argparse.Namespace) -> list[str] | EnvResolver | None:
    """--workers, else the environment variable, else None: an embedded cluster."""
    if args.workers:
        return [u for u in args.workers.split(",") if u]
    if os.environ.get(WORKERS_ENV):
        return EnvResolver()
    return None


def _session_context():
    """The SessionContext statements run in: with information_schema, so SHOW TABLES, SHOW
    ALL and SHOW <setting> work, and files queried by path (`SELECT * FROM 'x.parquet'`), as
    in datafusion-cli."""
    from datafusion import SessionConfig, SessionContext

    return SessionContext(SessionConfig().with_information_schema(True)).enable_url_table()


def run_sql(args: argparse.Namespace) -> int:
    """`sql`: run the files given, then the query given, then (with -i, or with neither on a
    terminal) the prompt; with neither and no terminal, the statements of standard input."""
    config = config_from_args(args)
    for path in args.file:
        if not Path(path).is_file():
            raise SystemExit(f"error: --file {path!r}: no such file")
    interactive = args.interactive or (not args.file and args.query is None and sys.stdin.isatty())
    show = ShowOptions(
        explain=args.explain,
        analyze=args.analyze,
        verbose=args.verbose,
        format=args.plan_format,
        results=args.format,
        maxrows=args.maxrows,
    )
    # the progress line goes to standard error, and only when that is a terminal
    with DistributedContext(
        _session_context(), _workers(args), config=config, progress=args.progress
    ) as dctx:
        if dctx.dashboard_url is not None:  # up until the command ends (the prompt's last statement)
            print(f"dashboard: {dctx.dashboard_url}", file=sys.stderr, flush=True)
        session = SqlSession(dctx, show)
        for spec in args.table:
            session.register_table(spec)
        for path in args.file:
            session.run_script(Path(path).read_text(encoding="utf-8"), path)
        if args.query is not None:
            session.run_script(args.query, "the query")
        if interactive:
            return Shell(session).run()
        if not args.file and args.query is None:
            session.run_script(sys.stdin.read(), "standard input")
    return 0


def add_sql_command(sub: argparse._SubParsersAction) -> None:
    """The `sql` subcommand and its flags."""
    sql = sub.add_parser(
        "sql",
        help="run SQL distributed: a query, files, standard input or an interactive prompt",
        description="Run SQL statements distributed, in one cluster for all of them.",
        epilog=f"Interactive history is kept in {history_path()}. Statements that change the session "
        "(CREATE EXTERNAL TABLE, CREATE VIEW, SET) last for the rest of the command.",
    )
    sql.add_argument(
        "query",
        nargs="?",
        help="statements to run, separated by ';' (after the --file ones); without a query or --file: "
        "an interactive prompt on a terminal, else the statements read from standard input",
    )
    sql.add_argument(
        "-f",
        "--file",
        action="append",
        default=[],
        metavar="FILE",
        help="run every statement of FILE in order, stopping at the first error (repeatable)",
    )
    sql.add_argument(
        "-i", "--interactive", action="store_true", help="then open the prompt, even after a query or --file"
    )
    sql.add_argument(
        "--workers",
        help=f"comma-separated worker URLs; without it, those in ${WORKERS_ENV} (read at every "
        "query); without that, an embedded cluster started in this process (see --embedded-workers)",
    )
    sql.add_argument("--table", action="append", default=[], help="name=path (parquet/csv/json/arrow/avro)")
    sql.add_argument("--explain", action="store_true", help="print each query's distributed plan instead")
    sql.add_argument(
        "--analyze", action="store_true", help="run each query and print its plan with metrics instead"
    )
    sql.add_argument("--verbose", action="store_true", help="with --analyze: every metric and every task")
    sql.add_argument(
        "--format",
        choices=FORMATS,
        default="automatic",
        help="how results are printed (automatic: a table), as datafusion-cli's --format",
    )
    sql.add_argument(
        "--maxrows",
        type=parse_maxrows,
        default=DEFAULT_MAXROWS,
        metavar="N|inf",
        help=f"rows a table shows at most (default {DEFAULT_MAXROWS}; inf: all)",
    )
    sql.add_argument(
        "--plan-format",
        choices=["text", "graphviz", "mermaid"],
        default="text",
        help="plan format of --explain and --analyze",
    )
    sql.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no live progress line (it is only drawn when standard error is a terminal)",
    )
    add_setting_flags(sql)
    sql.set_defaults(run=run_sql)
