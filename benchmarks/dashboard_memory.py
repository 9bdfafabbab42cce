"""The query history's memory (what the dashboard, `on_progress` and the `distributed.*` tables
read): the 22 TPC-H queries run round after round on one context, and after each round the
records kept and the Python memory they hold (every object reachable from them, plans
included while kept), which stops growing once `--history-length` queries are kept.

    python benchmarks/dashboard_memory.py --sf 0.1 --rounds 6 --history-length 44
"""

from __future__ import annotations

import argparse
import gc
import sys
import types

from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

# objects whose memory is not the history's: shared with the rest of the process
_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def deep_size(root: object) -> int:
    """Bytes of `root` and of every object reachable from it (each counted once), classes,
    modules and functions left out."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sf", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=6, help="times the 22 queries run")
    p.add_argument("--history-length", type=int, default=44)
    p.add_argument("--explain", action="store_true", help="ask for each query's plan text, as its page does")
    args = p.parse_args(argv)
    ctx = SessionContext()
    register_tpch(ctx, tpch_data(args.sf, 4))
    config = DistributedConfig(history_length=args.history_length, dashboard_port=0)
    print(f"TPC-H SF {args.sf:g}, history_length={args.history_length}; after each round of 22 queries:")
    print(f"{'round':>5} {'queries kept':>12} {'task attempts':>13} {'history MiB':>11} {'KiB/query':>9}")
    with DistributedContext(ctx, config=config) as dctx:
        history = dctx.engine.history
        for round_ in range(1, args.rounds + 1):
            for n in range(1, 23):
                df = dctx.sql(tpch_query(n))
                df.to_arrow_table()
                if args.explain:
                    history.explain(df.metrics.query_id)
            kept, attempts = history.read(lambda rs: (len(rs), sum(len(q.attempts) for q in rs)))
            size = deep_size(history.read(list))
            print(
                f"{round_:>5} {kept:>12} {attempts:>13} {size / 2**20:>11.2f} {size / 1024 / kept:>9.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
