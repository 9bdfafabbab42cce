"""Command line: run a worker, or run SQL distributed.

    DATAFUSION_DISTRIBUTED_TOKEN=... datafusion-distributed worker --host 127.0.0.1 --port 50051
    datafusion-distributed sql "SELECT ..." --workers grpc://h1:50051,grpc://h2:50051 \\
        --table lineitem=data/lineitem/ [--explain]
    datafusion-distributed sql -f report.sql      # or no query: a prompt, or standard input
    datafusion-distributed drain grpc://h1:50051 --wait   # a worker leaves, losing no work
    datafusion-distributed serve --port 32010 --init tables.sql   # Arrow Flight SQL for clients

`worker.py`, `sql.py`, `drain.py` and `serve.py` make the four commands; `shell.py` is the
interactive prompt.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..common.allocator import hand_back_lazily
from ..common.lean_imports import import_datafusion_without_pandas

hand_back_lazily()  # before DataFusion's allocator reads its settings
import_datafusion_without_pandas()  # before the commands' modules import DataFusion

from .drain import add_drain_command  # noqa: E402
from .serve import add_serve_command  # noqa: E402
from .sql import add_sql_command  # noqa: E402
from .worker import add_worker_command  # noqa: E402

# The exit status of a command stopped by Ctrl-C, as shells report SIGINT (128 + 2).
INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """The parser of the subcommands; each sets `run` to the function that carries it out."""
    parser = argparse.ArgumentParser(prog="datafusion-distributed", description=__doc__.split("\n")[0])
    parser.add_argument("--log-level", default="WARNING", help="logging level (DEBUG, INFO, ...)")
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    add_worker_command(sub)
    add_sql_command(sub)
    add_drain_command(sub)
    add_serve_command(sub)
    return parser


def version_line() -> str:
    """What `--version` prints: this package's version and the DataFusion wheel's."""
    from importlib.metadata import version

    from ..common.version import __version__

    return f"datafusion-distributed {__version__} (DataFusion {version('datafusion')})"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code (1 with a one-line message on an error, 130
    with "cancelled" after Ctrl-C)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr, flush=True)
        return INTERRUPTED
    except Exception as exc:  # a clear message instead of a traceback
        if args.log_level.upper() == "DEBUG":
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
