"""Adaptive execution: single-node DataFusion, distributed static and distributed adaptive, side
by side, on data shaped to make static plans guess wrong.

"static" is ``DistributedConfig(adaptive=False)``: every stage runs as planned from DataFusion's
estimates. "adaptive" is the default config, which re-plans the stages still to run from the
sizes finished stages really produced: small consumer stages coalesced into fewer tasks, a small
final stage folded into the coordinator, a hot shuffle partition of a join split across tasks.

The data is generated once (numpy, fixed seed) and cached under the benchmarks' data folder
(``data/adaptive/``, git-ignored): a fact table of ``--rows`` rows and a dimension of
``--dim-rows`` (half of ``--rows`` by default), as Parquet, and the dimension again as CSV (no
statistics). In ``fact``, 40% of the rows hold one key ``k`` (the hot key); ``u`` is a key
spread evenly over the dimension; a few hundred rows have a small ``w`` (everywhere else 10^9),
and so do a few hundred dimension rows in ``sel``: a ``< 9 * 10^8`` filter on either is
estimated from the Parquet min/max at 90% of the rows and keeps a few hundred.

The queries (``--queries 1,3``):

1. the skewed join: ``fact JOIN dim ON k`` grouped by ``dim.attr``, a partitioned (shuffled)
   hash join at the default broadcast settings (checked on the plan);
2. the same join with the dimension read from CSV, which DataFusion cannot estimate;
3. the dimension filtered by ``sel``: estimated large, so shuffled, really a few hundred rows
   (a broadcast would have been right);
4. both sides filtered to a few hundred rows before a join, an aggregate and a sort;
5. the skewed aggregation: ``GROUP BY k``;
6. the control: the same join on the even key ``u``, nothing skewed (adaptive must not be
   slower);
7. two joins, the skewed one feeding a second shuffle on ``u``.

Each query runs ``--iterations`` times after ``--warmup``, the sides interleaved (the order
alternating between iterations), over one ``LocalCluster`` of ``--workers`` worker processes,
each confined to a core of its own from its start (``--no-pin``: not; Linux), shared by the static and the adaptive context; with
``--embedded`` also over two in-process clusters, one per config. Every distributed answer is
checked against single-node's of the same iteration; each side's peak resident memory is
measured per run (``common.timed_with_usage``). Results go to ``benchmarks/results/`` as JSON.

    python benchmarks/adaptive.py                       # 6 M fact rows, 3 M dimension rows
    python benchmarks/adaptive.py --rows 1000000 --queries 1,6 --iterations 5 --embedded
    python benchmarks/adaptive.py --rows 20000 --set broadcast_total_rows=0,broadcast_total_bytes=0

``--set`` gives both distributed sides the same ``DistributedConfig`` settings: at a small
``--rows`` the dimension would be broadcast (or the query run on one node); the script names
every query whose plan lacks the shuffled join its shape is about.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import statistics
import sys
import tempfile
import traceback
from pathlib import Path

import datafusion
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from common import (
    add_common_args,
    add_output_arg,
    add_pin_arg,
    git_commit,
    query_numbers,
    result_path,
    timed_with_usage,
    utc_timestamp,
    worker_cores,
    write_json,
)
from datafusion import SessionConfig, SessionContext
from tpch import fmt, parse_variant, ratio, ratios, summary

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import data_root

SINGLE = "single"
STATIC = "static"
ADAPTIVE = "adaptive"

SEED = 20260
HOT_SHARE = 0.4  # of the fact rows, on the hot key
HOT_KEY = 7
RARE = 300  # fact rows with a small `w`, dimension rows with a small `sel`
BIG = 1_000_000_000  # `w` and `sel` everywhere else
CUT = 900_000_000  # the filter: estimated to keep 90% of the rows (min/max 0 .. BIG)
ATTRS = 100  # distinct values of dim.attr

# number: (shape, SQL, the join the plan should hold at the default scale, or None)
QUERIES: dict[int, tuple[str, str, str | None]] = {
    1: (
        "skewed join",
        "SELECT d.attr, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON f.k = d.k GROUP BY d.attr",
        "partitioned",
    ),
    2: (
        "skewed join, CSV dim",
        "SELECT d.attr, count(*) AS n, sum(f.v) AS s FROM dim_csv d JOIN fact f ON f.k = d.k GROUP BY d.attr",
        "partitioned",
    ),
    3: (
        "build side filtered small",
        f"SELECT d.attr, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON f.u = d.k "
        f"WHERE d.sel < {CUT} GROUP BY d.attr",
        "partitioned",
    ),
    4: (
        "filtered to a few hundred rows",
        f"SELECT d.attr, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON f.u = d.k "
        f"WHERE f.w < {CUT} AND d.sel < {CUT} GROUP BY d.attr ORDER BY n DESC, d.attr",
        "partitioned",
    ),
    5: (
        "skewed aggregation",
        "SELECT f.k, count(*) AS n, sum(f.v) AS s FROM fact f GROUP BY f.k HAVING count(*) > 4",
        None,
    ),
    6: (
        "even join (control)",
        "SELECT d.attr, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON f.u = d.k GROUP BY d.attr",
        "partitioned",
    ),
    7: (
        "skewed join, then another",
        "SELECT d1.attr AS a1, d2.attr AS a2, count(*) AS n, sum(f.v) AS s FROM fact f "
        "JOIN dim d1 ON f.k = d1.k JOIN dim d2 ON f.u = d2.k GROUP BY d1.attr, d2.attr",
        "partitioned",
    ),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=6_000_000, help="fact rows (default 6000000)")
    p.add_argument("--dim-rows", type=int, help="dimension rows (default: half of --rows)")
    add_common_args(
        p,
        helps={"parts": "Parquet (and CSV) files per table", "queries": "comma-separated query numbers"},
        parts=4,
        workers=2,
        iterations=3,
        warmup=1,
        queries=",".join(map(str, QUERIES)),
    )
    p.add_argument("--embedded", action="store_true", help="also run both configs over in-process clusters")
    add_pin_arg(p)
    p.add_argument(
        "--set",
        metavar="SETTING=VALUE,...",
        help="DistributedConfig settings of both sides, e.g. broadcast_total_rows=0 (partitioned "
        "joins at a small --rows)",
    )
    add_output_arg(p)
    args = p.parse_args(argv)
    if args.dim_rows is None:
        args.dim_rows = args.rows // 2
    if args.rows < 10 or args.dim_rows < 10 or args.parts < 1:
        raise SystemExit("--rows and --dim-rows must be at least 10, --parts at least 1")
    if args.iterations < 1:
        raise SystemExit("--iterations must be at least 1")
    return args


# -- data ---------------------------------------------------------------------------------------


def adaptive_data(rows: int, dim_rows: int, parts: int) -> Path:
    """The folder of `fact/`, `dim/` (Parquet) and `dim_csv/`, generated on first use.

    Written into a temporary folder renamed into place, so a data set is complete or absent."""
    root = data_root() / "adaptive"
    target = root / f"f{rows}-d{dim_rows}-p{parts}"
    if (target / "_done").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=root))
    try:
        _generate(staging, rows, dim_rows, parts)
        (staging / "_done").write_text("")
        shutil.rmtree(target, ignore_errors=True)  # an incomplete set left by a killed run
        try:
            staging.rename(target)
        except OSError:
            if not (target / "_done").is_file():  # another run finished it first: theirs
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _generate(out: Path, rows: int, dim_rows: int, parts: int) -> None:
    rng = np.random.default_rng(SEED)
    rare = min(RARE, max(1, dim_rows // 10))
    # the dimension keys whose `sel` is small, the hot key not among them
    stride = max(1, dim_rows // rare)
    rare_keys = np.arange(rare, dtype=np.int64) * stride + 1
    rare_keys = rare_keys[(rare_keys != HOT_KEY) & (rare_keys < dim_rows)]

    hot = np.zeros(rows, dtype=bool)
    hot[: round(rows * HOT_SHARE)] = True
    hot = rng.permutation(hot)
    k = np.where(hot, HOT_KEY % dim_rows, rng.integers(0, dim_rows, rows, dtype=np.int64))
    u = rng.integers(0, dim_rows, rows, dtype=np.int64)
    w = np.full(rows, BIG, dtype=np.int64)
    rare_rows = rng.choice(rows, size=min(rare, rows), replace=False)
    w[rare_rows] = rng.integers(0, CUT, rare_rows.size, dtype=np.int64)
    u[rare_rows] = rng.choice(rare_keys, rare_rows.size)  # so that the filtered sides meet
    fact = pa.table(
        {"k": k, "u": u, "v": rng.integers(0, 1000, rows, dtype=np.int64), "w": w},
    )

    dim_k = np.arange(dim_rows, dtype=np.int64)
    names = pa.array([f"attr{i:03d}" for i in range(ATTRS)])
    sel = np.full(dim_rows, BIG, dtype=np.int64)
    sel[rare_keys] = rng.integers(0, CUT, rare_keys.size, dtype=np.int64)
    dim = pa.table(
        {"k": dim_k, "attr": names.take(pa.array(rng.integers(0, ATTRS, dim_rows))), "sel": sel},
    )

    for name, table in (("fact", fact), ("dim", dim)):
        (out / name).mkdir()
        for i, piece in enumerate(_pieces(table, parts)):
            pq.write_table(piece, out / name / f"{name}.{i}.parquet")
    (out / "dim_csv").mkdir()
    for i, piece in enumerate(_pieces(dim, parts)):
        pacsv.write_csv(piece, out / "dim_csv" / f"dim.{i}.csv")


def _pieces(table: pa.Table, parts: int) -> list[pa.Table]:
    size = -(-table.num_rows // parts)
    return [table.slice(i * size, size) for i in range(parts) if i * size < table.num_rows]


def register(ctx: SessionContext, data: Path) -> None:
    ctx.register_parquet("fact", str(data / "fact"))
    ctx.register_parquet("dim", str(data / "dim"))
    schema = pa.schema([("k", pa.int64()), ("attr", pa.string()), ("sel", pa.int64())])
    ctx.register_csv("dim_csv", str(data / "dim_csv"), schema=schema)


# -- configs ------------------------------------------------------------------------------------


def configs(workers: int, settings: dict) -> dict[str, DistributedConfig]:
    """The static and the adaptive config: `settings` over the defaults, run as cut or re-planned."""
    base = DistributedConfig(**{"partitions_per_task": 1, "embedded_workers": workers, **settings})
    return {
        STATIC: dataclasses.replace(base, adaptive=False),
        ADAPTIVE: dataclasses.replace(base, adaptive=True),
    }


def join_modes(explain: str) -> str:
    """The hash joins of an explained plan, in plan order: "partitioned", "broadcast"
    (CollectLeft) or "-" for none."""
    modes = []
    for line in explain.splitlines():
        if "HashJoinExec: mode=" in line:
            mode = line.split("HashJoinExec: mode=", 1)[1].split(",", 1)[0].strip()
            modes.append({"Partitioned": "partitioned", "CollectLeft": "broadcast"}.get(mode, mode))
    return "/".join(modes) or "-"


def worker_tasks(metrics) -> tuple[int, int] | None:
    """Stages and tasks a distributed run ran on workers, from its metrics."""
    if metrics is None:
        return None
    return len(metrics.stages), sum(len(s.tasks) for s in metrics.stages.values())


# -- the run ------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    numbers = query_numbers(args.queries, known=QUERIES)
    print(f"generating / reusing {args.rows} fact rows, {args.dim_rows} dimension rows ...", flush=True)
    data = adaptive_data(args.rows, args.dim_rows, args.parts)
    single_ctx = SessionContext(SessionConfig().with_target_partitions(args.workers))
    register(single_ctx, data)
    settings = parse_variant(f"set:{args.set}")[1] if args.set else {}
    sides = configs(args.workers, settings)

    contexts: dict[str, DistributedContext] = {}
    pids: dict[str, list[int]] = {SINGLE: []}
    cores = worker_cores(args.workers, args.pin)
    cluster = LocalCluster(args.workers, worker_cpus=cores)
    try:
        worker_pids = [p.pid for p in cluster.processes]
        for prefix in ["", "embedded-"] if args.embedded else [""]:
            for side, config in sides.items():
                ctx = SessionContext()
                register(ctx, data)
                if prefix:  # an in-process cluster of its own; its memory is this process's
                    contexts[prefix + side] = DistributedContext(ctx, config=config)
                    pids[prefix + side] = []
                else:
                    contexts[side] = DistributedContext(ctx, workers=cluster, config=config)
                    pids[side] = list(worker_pids)
        modes = [SINGLE, *contexts]
        print(
            f"{len(numbers)} queries x {args.iterations} iterations (+{args.warmup} warm-up); "
            f"single-node target_partitions={args.workers}; distributed: {args.workers} workers "
            f"{f'on cores {cores}' if cores else 'unpinned'}, 1 partition per task",
            flush=True,
        )
        results = {n: run_query(n, args, single_ctx, contexts, modes, pids) for n in numbers}
    finally:
        for dctx in contexts.values():
            dctx.close()
        cluster.close()

    result = {
        "meta": {
            "timestamp": utc_timestamp(),
            "commit": git_commit(),
            "rows": args.rows,
            "dim_rows": args.dim_rows,
            "parts": args.parts,
            "workers": args.workers,
            "worker_cores": cores,
            "iterations": args.iterations,
            "warmup": args.warmup,
            "settings": {k: repr(v) for k, v in settings.items()},
            "datafusion": datafusion.__version__,
            "pyarrow": pa.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
        },
        "queries": {f"q{n}": r for n, r in results.items()},
    }
    print()
    print_table(result, modes)
    out = result_path(args.output, f"adaptive-f{args.rows}-w{args.workers}")
    write_json(out, result)
    print(f"\nwrote {out}")
    errors = {q: r["error"] for q, r in result["queries"].items() if r["error"]}
    if errors:
        print(f"\n{len(errors)} query(ies) failed or gave a different answer:")
        for q, e in errors.items():
            print(f"  {q}: {e.splitlines()[0][:300]}")
        return 1
    return 0


def run_query(n, args, single_ctx, contexts, modes, pids) -> dict:
    shape, sql, expected_join = QUERIES[n]
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float | None]] = {m: [] for m in modes}
    peaks: dict[str, list[float | None]] = {m: [] for m in modes}
    ran: dict[str, tuple[int, int] | None] = {}
    joins: dict[str, str] = {}
    error = None

    def runner(mode):
        if mode == SINGLE:
            return lambda: single_ctx.sql(sql).to_arrow_table()

        def distributed():
            df = contexts[mode].sql(sql)
            table = df.to_arrow_table()
            ran[mode] = worker_tasks(df.metrics)
            return table

        return distributed

    try:
        for mode, dctx in contexts.items():
            joins[mode] = join_modes(dctx.sql(sql).explain_string())
        for i in range(args.warmup + args.iterations):
            order = modes if i % 2 == 0 else modes[::-1]
            answers = {}
            for mode in order:
                seconds, cpu, peak, answers[mode] = timed_with_usage(runner(mode), pids[mode], True)
                if i >= args.warmup:
                    times[mode].append(seconds)
                    cpus[mode].append(cpu)
                    peaks[mode].append(peak)
            for mode in contexts:
                assert_tables_equal(answers[mode], answers[SINGLE], sql=sql)
    except Exception as exc:  # keep going: one broken query must not hide the others
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    plan_join = joins.get(STATIC, "?")
    note = ""
    if expected_join and plan_join != "?" and expected_join not in plan_join.split("/"):
        note = f"  (no {expected_join} join at this scale: {plan_join})"
    line = "  ".join(f"{m} {fmt(statistics.median(times[m])).strip()}s" for m in modes if times[m])
    print(f"  q{n} {shape}: {line}  ({'FAILED' if error else plan_join}){note}", flush=True)
    return {
        "shape": shape,
        "sql": sql,
        **{m: summary(times[m], cpus[m], peaks[m]) for m in modes},
        "joins": joins,
        "expected_join": expected_join,
        "worker_stages_tasks": {m: list(v) if v else None for m, v in ran.items()},
        "error": error,
    }


def print_table(result: dict, modes: list[str]) -> None:
    others = modes[1:]
    header = f"{'query':<34} | {'single':>8}"
    for m in others:
        header += f" | {m:>17} {'ratio':>6} {'cpu':>5}"
    header += f" | {'adaptive/static':>15}"
    print(header)
    print("-" * len(header))
    queries = result["queries"]
    for q, r in queries.items():
        line = f"{q + ' ' + r['shape']:<34} | {fmt(r[SINGLE]['median'])}"
        for m in others:
            line += f" | {fmt(r[m]['median']):>17} {ratios(r[m], r[SINGLE])}"
        line += f" | {ratio(r[ADAPTIVE]['median'], r[STATIC]['median']):>15}"
        if r["error"]:
            line += "  FAILED"
        print(line)
    total = {m: _sum(queries, m, "median") for m in modes}
    cpu = {m: _sum(queries, m, "cpu_median") for m in modes}
    line = f"{'the set':<34} | {fmt(total[SINGLE])}"
    for m in others:
        line += (
            f" | {fmt(total[m]):>17} {ratio(total[m], total[SINGLE])} {ratio(cpu[m], cpu[SINGLE]).strip():>5}"
        )
    print("-" * len(header))
    print(line + f" | {ratio(total[ADAPTIVE], total[STATIC]):>15}")
    print(
        "(median seconds; ratio = median distributed / median single-node; cpu = the same for CPU seconds,"
        " this process and the workers; the set: sums over its queries)"
    )
    print()
    print(
        f"{'query':<34} "
        + " ".join(f"{m:>17}" for m in modes)
        + "   (peak resident MB, summed over processes)"
    )
    for q, r in result["queries"].items():
        print(f"{q + ' ' + r['shape']:<34} " + " ".join(f"{_mb(r[m]['peak_mb']):>17}" for m in modes))
    print()
    print(
        f"{'query':<34} "
        + " ".join(f"{m:>17}" for m in others)
        + "   (join modes planned; stages/tasks run on workers)"
    )
    for q, r in result["queries"].items():
        cells = [f"{r['joins'].get(m, '?')} {_ran(r['worker_stages_tasks'].get(m))}" for m in others]
        print(f"{q + ' ' + r['shape']:<34} " + " ".join(f"{c:>17}" for c in cells))


def _sum(queries: dict, mode: str, key: str) -> float | None:
    """The sum of one figure over the queries, None if any query lacks it."""
    values = [r[mode].get(key) for r in queries.values()]
    return None if any(v is None for v in values) else sum(values)


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ran(value: list[int] | None) -> str:
    return "-" if not value else f"{value[0]}/{value[1]}"


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
