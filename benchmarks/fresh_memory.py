"""TPC-H peak memory, each query on each side in fresh processes.

    python benchmarks/fresh_memory.py --sf 1 --workers 2
    python benchmarks/fresh_memory.py --queries 18,21 --sides single,local
    python benchmarks/fresh_memory.py --queries 12,18 --setting broadcast_row_bytes=32

`tpch.py --memory` measures every side in one long-lived process, whose allocator keeps what
earlier runs freed: a side's figure then carries what other sides' runs left behind. Here each
(query, side) runs in a new Python process: single-node DataFusion (`single`), the embedded
cluster (`embedded`) or a `LocalCluster` of `--workers` worker processes (`local`, whose new
workers start with it). The figure is the peak resident memory (VmHWM) of every process of
the side, summed, after one run of the query: what that query costs on fresh processes,
idle baselines included (a worker process with DataFusion loaded is about 130 MB). Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import add_common_args, add_output_arg, peak_rss_mb, query_numbers, rss_mb, write_json

SIDES = ("single", "embedded", "local")


def run_child(args: argparse.Namespace) -> None:
    """Run one query once on one side, in this new process; print its peak memory as JSON."""
    from datafusion import SessionConfig, SessionContext

    from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
    from datafusion_distributed.api.settings import parse_value
    from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

    data = tpch_data(args.sf, parts=args.parts)
    sql = tpch_query(args.query)
    partitions = args.workers * args.partitions_per_task
    settings = {
        name: parse_value(name, value) for name, value in (item.split("=", 1) for item in args.setting)
    }
    config = DistributedConfig(
        partitions_per_task=args.partitions_per_task, embedded_workers=args.workers, **settings
    )
    if args.side == "single":
        ctx = SessionContext(SessionConfig().with_target_partitions(partitions))
        register_tpch(ctx, data)
        rows = ctx.sql(sql).to_arrow_table().num_rows
        peak = rss_mb()
    else:
        ctx = SessionContext()
        register_tpch(ctx, data)
        cluster = LocalCluster(args.workers) if args.side == "local" else None
        try:
            with DistributedContext(ctx, workers=cluster, config=config) as dctx:
                rows = dctx.sql(sql).to_arrow_table().num_rows
                peak = peak_rss_mb([p.pid for p in cluster.processes] if cluster else [])
        finally:
            if cluster is not None:
                cluster.close()
    print(json.dumps({"peak_mb": peak, "rows": rows}))


def measure(args: argparse.Namespace, query: int, side: str) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        "--side",
        side,
        "--query",
        str(query),
        "--sf",
        str(args.sf),
        "--parts",
        str(args.parts),
        "--workers",
        str(args.workers),
        "--partitions-per-task",
        str(args.partitions_per_task),
        *(f"--setting={item}" for item in args.setting),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False)
    if done.returncode != 0:
        return {
            "error": done.stderr.strip().splitlines()[-1]
            if done.stderr.strip()
            else f"exit {done.returncode}"
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, sf=1.0, parts=4, workers=2, partitions_per_task=1, queries="")
    p.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of {', '.join(SIDES)}")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a DistributedConfig setting of the distributed sides (repeatable)",
    )
    add_output_arg(p)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--query", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        run_child(args)
        return
    if not os.path.exists("/proc/self/status"):
        raise SystemExit("fresh_memory.py reads /proc: Linux only")
    queries = query_numbers(args.queries)
    sides = [s for s in args.sides.split(",") if s]
    if not sides or any(s not in SIDES for s in sides):
        raise SystemExit(f"--sides: choose among {', '.join(SIDES)}")
    print(
        f"peak resident MB summed over each side's fresh processes (TPC-H SF {args.sf:g}, {args.workers} workers)"
    )
    print(f"{'query':>5} " + " ".join(f"{s:>18}" for s in sides))
    results: dict[str, dict[str, dict]] = {}
    for query in queries:
        row = results[f"q{query:02d}"] = {side: measure(args, query, side) for side in sides}
        rows = {r["rows"] for r in row.values() if "rows" in r}
        cells = []
        for side in sides:
            r, base = row[side], row.get("single", {}).get("peak_mb")
            if "error" in r:
                cells.append("FAILED")
            else:
                cells.append(f"{r['peak_mb']:.0f}" + (f" ({r['peak_mb'] / base:.2f})" if base else ""))
        note = "" if len(rows) <= 1 else "  (row counts differ!)"
        print(f"  q{query:02d} " + " ".join(f"{c:>18}" for c in cells) + note, flush=True)
        for side in sides:
            if "error" in row[side]:
                print(f"        {side}: {row[side]['error']}")
    peaks = {
        s: max((r[s]["peak_mb"] for r in results.values() if "peak_mb" in r[s]), default=None) for s in sides
    }
    base = peaks.get("single")
    cells = [
        "-" if v is None else f"{v:.0f}" + (f" ({v / base:.2f})" if base else "") for v in peaks.values()
    ]
    print(f"{'max':>5} " + " ".join(f"{c:>18}" for c in cells))
    if args.output:
        write_json(Path(args.output), {"sf": args.sf, "workers": args.workers, "queries": results})


if __name__ == "__main__":
    main()
