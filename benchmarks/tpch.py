"""TPC-H: single-node DataFusion against the same queries run distributed, side by side.

Each query runs ``--iterations`` times, interleaved (single-node, distributed, [embedded]), so
that both sides see the same machine state; the order alternates between iterations. Every
distributed answer is checked against the single-node answer of the same iteration.

Single-node runs a plain ``SessionContext`` with ``target_partitions = workers *
partitions_per_task``; distributed runs over a ``LocalCluster`` of ``--workers`` worker
processes, each on a core of its own from its start (``--no-pin``: on every core), and with
``--embedded`` over the in-process cluster as well.

    python benchmarks/tpch.py --sf 1 --workers 2 --partitions-per-task 1 --iterations 3
    python benchmarks/tpch.py --queries 1,3 --compare benchmarks/results/OLD.json

Next to wall time, each run's CPU time is measured: this process's, plus (for the worker
processes, Linux only) the workers'. On a machine whose cores both sides keep busy, the CPU
ratio is the floor under the time ratio: it is the extra work distribution does (exchange
files written and read, build sides computed by every task), apart from waiting.

Two settings of the library can be compared in the same run: ``--variant NAME:SETTING=VALUE,...``
adds a distributed side (and an embedded one with ``--embedded``) planned with those
``DistributedConfig`` settings, over a ``LocalCluster`` of its own, interleaved with the others:

    python benchmarks/tpch.py --embedded --memory --variant before:broadcast_row_bytes=32

``--memory`` records each side's peak resident memory per query, summed over its processes
(Linux only): every process's high-water mark (VmHWM) is reset through ``/proc/PID/clear_refs``
before each run and read after it. Single-node and the embedded cluster run in this process, so
their figures include what this process holds anyway (the coordinators, what its allocator
kept from earlier runs); a ``LocalCluster``'s sum is this process's peak plus its workers'.

Results are written as JSON to ``benchmarks/results/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import traceback
from pathlib import Path

import datafusion
import pyarrow as pa
from common import (
    add_common_args,
    add_output_arg,
    add_pin_arg,
    best_and_median,
    git_commit,
    query_numbers,
    result_path,
    timed_with_usage,
    utc_timestamp,
    worker_cores,
    write_json,
)
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.api.settings import parse_value
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

SINGLE = "single"
DISTRIBUTED = "distributed"
EMBEDDED = "embedded"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, sf=1.0, parts=4, workers=2, partitions_per_task=1, iterations=3, warmup=1, queries="")
    add_pin_arg(p)
    p.add_argument(
        "--compression",
        default="auto",
        choices=["auto", "lz4", "zstd", "none"],
        help="spool codec (default auto: none, as LocalCluster workers read each other's files in place)",
    )
    p.add_argument("--embedded", action="store_true", help="also run over the in-process cluster")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:SETTING=VALUE,...",
        help="also run distributed with these DistributedConfig settings (repeatable)",
    )
    p.add_argument(
        "--memory", action="store_true", help="record each side's peak resident memory per query (Linux)"
    )
    p.add_argument("--compare", metavar="OLD.json", help="print the change against an earlier result")
    add_output_arg(p)
    return p.parse_args(argv)


def parse_variant(spec: str) -> tuple[str, dict]:
    """`NAME:SETTING=VALUE,...` as a name and DistributedConfig settings (read by their types)."""
    name, _, settings = spec.partition(":")
    if not name or not settings:
        raise SystemExit(f"--variant takes NAME:SETTING=VALUE,..., got {spec!r}")
    values = {}
    for item in settings.split(","):
        key, _, text = item.partition("=")
        try:
            values[key.strip()] = parse_value(key.strip(), text.strip())
        except ValueError as exc:
            raise SystemExit(f"--variant {name}: {exc}") from None
    return name, values


def summary(times: list[float], cpus: list[float | None], peaks: list[float | None]) -> dict:
    if not times:
        return {"best": None, "median": None, "runs": [], "cpu_median": None, "cpu_runs": [], "peak_mb": None}
    known = [c for c in cpus if c is not None]
    measured = [m for m in peaks if m is not None]
    return {
        **best_and_median(times),
        "cpu_median": statistics.median(known) if len(known) == len(cpus) else None,
        "cpu_runs": cpus,
        "peak_mb": max(measured) if measured else None,
    }


def fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:8.3f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:6.2f}"


def run(args: argparse.Namespace) -> int:
    numbers = query_numbers(args.queries)
    target_partitions = args.workers * args.partitions_per_task
    print(f"generating / reusing TPC-H SF {args.sf:g} with {args.parts} files per table ...", flush=True)
    data = tpch_data(args.sf, args.parts)

    single_ctx = SessionContext(SessionConfig().with_target_partitions(target_partitions))
    register_tpch(single_ctx, data)
    config = DistributedConfig(
        partitions_per_task=args.partitions_per_task,
        embedded_workers=args.workers,
        compression=None if args.compression == "none" else args.compression,
    )

    variants = dict(parse_variant(spec) for spec in args.variant)
    contexts: dict[str, DistributedContext] = {}
    clusters: dict[str, LocalCluster] = {}
    # The workers' CPU and memory count for the worker processes; the embedded cluster's are this process's.
    pids: dict[str, list[int]] = {SINGLE: []}
    try:
        for suffix, settings in [("", {}), *((f":{name}", values) for name, values in variants.items())]:
            variant_config = dataclasses.replace(config, **settings)
            cores = worker_cores(args.workers, args.pin)
            cluster = clusters[DISTRIBUTED + suffix] = LocalCluster(args.workers, worker_cpus=cores)
            dist_ctx = SessionContext()
            register_tpch(dist_ctx, data)
            contexts[DISTRIBUTED + suffix] = DistributedContext(
                dist_ctx, workers=cluster, config=variant_config
            )
            pids[DISTRIBUTED + suffix] = [p.pid for p in cluster.processes]
            if args.embedded:
                emb_ctx = SessionContext()
                register_tpch(emb_ctx, data)
                contexts[EMBEDDED + suffix] = DistributedContext(emb_ctx, config=variant_config)
                pids[EMBEDDED + suffix] = []

        modes = [SINGLE, *contexts]
        runners = {SINGLE: lambda sql: single_ctx.sql(sql).to_arrow_table()}
        for mode, dctx in contexts.items():
            runners[mode] = lambda sql, d=dctx: d.sql(sql).to_arrow_table()

        times: dict[int, dict[str, list[float]]] = {n: {m: [] for m in modes} for n in numbers}
        cpus: dict[int, dict[str, list[float | None]]] = {n: {m: [] for m in modes} for n in numbers}
        peaks: dict[int, dict[str, list[float | None]]] = {n: {m: [] for m in modes} for n in numbers}
        errors: dict[int, str] = {}
        stages: dict[int, int] = {}
        print(
            f"{len(numbers)} queries x {args.iterations} iterations (+{args.warmup} warm-up); "
            f"single-node target_partitions={target_partitions}; "
            f"distributed: {args.workers} workers x {args.partitions_per_task} partition(s) per task",
            flush=True,
        )
        for n in numbers:
            sql = tpch_query(n)
            try:
                stages[n] = {m: len(d.sql(sql).distributed_plan().stages) for m, d in contexts.items()}
                for i in range(args.warmup + args.iterations):
                    order = modes if i % 2 == 0 else modes[::-1]
                    answers = {}
                    for mode in order:
                        seconds, cpu, peak, answers[mode] = timed_with_usage(
                            lambda m=mode, s=sql: runners[m](s), pids[mode], args.memory
                        )
                        if i >= args.warmup:
                            times[n][mode].append(seconds)
                            cpus[n][mode].append(cpu)
                            peaks[n][mode].append(peak)
                    for mode in contexts:
                        assert_tables_equal(answers[mode], answers[SINGLE], sql=sql)
            except Exception as exc:  # keep going: one broken query must not hide the others
                errors[n] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
            line = "  ".join(
                f"{m} {fmt(statistics.median(times[n][m])).strip()}s" for m in modes if times[n][m]
            )
            shown = "/".join(str(c) for c in stages.get(n, {}).values()) or "?"
            status = "FAILED" if n in errors else f"{shown} stages"
            print(f"  q{n:02d}: {line}  ({status})", flush=True)
    finally:
        for dctx in contexts.values():
            dctx.close()
        for cluster in clusters.values():
            cluster.close()

    result = {
        "meta": {
            "timestamp": utc_timestamp(),
            "commit": git_commit(),
            "scale_factor": args.sf,
            "parts": args.parts,
            "workers": args.workers,
            "partitions_per_task": args.partitions_per_task,
            "worker_cores": worker_cores(args.workers, args.pin),
            "single_target_partitions": target_partitions,
            "iterations": args.iterations,
            "warmup": args.warmup,
            "compression": args.compression,
            "variants": {name: {k: repr(v) for k, v in values.items()} for name, values in variants.items()},
            "memory": args.memory,
            "datafusion": datafusion.__version__,
            "pyarrow": pa.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
        },
        "queries": {
            f"q{n:02d}": {
                **{m: summary(times[n][m], cpus[n][m], peaks[n][m]) for m in modes},
                "stages": stages.get(n, {}).get(DISTRIBUTED),
                "variant_stages": stages.get(n),
                "error": errors.get(n),
            }
            for n in numbers
        },
    }
    result["totals"] = totals(result, modes)
    print()
    print_table(result, modes)
    out = result_path(args.output, f"tpch-sf{args.sf:g}-w{args.workers}-p{args.partitions_per_task}")
    write_json(out, result)
    print(f"\nwrote {out}")
    if args.compare:
        print()
        print_comparison(json.loads(Path(args.compare).read_text()), result, modes)
    if errors:
        print(f"\n{len(errors)} query(ies) failed or gave a different answer: {sorted(errors)}")
        for n, e in errors.items():
            print(f"  q{n:02d}: {e.splitlines()[0][:300]}")
        return 1
    return 0


def totals(result: dict, modes: list[str]) -> dict:
    """Suite totals over the queries that succeeded in every mode."""
    ok = [q for q, r in result["queries"].items() if not r["error"] and all(r[m]["median"] for m in modes)]

    def total(mode: str, key: str) -> float | None:
        values = [result["queries"][q][mode].get(key) for q in ok]
        return None if any(v is None for v in values) else sum(values)

    def peak(mode: str) -> float | None:
        values = [result["queries"][q][mode].get("peak_mb") for q in ok]
        return None if not values or any(v is None for v in values) else max(values)

    return {
        "queries": len(ok),
        **{
            m: {**{key: total(m, key) for key in ("best", "median", "cpu_median")}, "peak_mb": peak(m)}
            for m in modes
        },
    }


def print_table(result: dict, modes: list[str]) -> None:
    others = modes[1:]
    header = f"{'query':>5} {'stages':>6} | {'single best':>11} {'median':>8}"
    for m in others:
        header += f" | {m + ' best':>16} {'median':>8} {'ratio':>6} {'cpu':>5}"
    print(header)
    print("-" * len(header))
    for q, r in result["queries"].items():
        line = f"{q:>5} {r['stages'] or '-':>6} | {fmt(r[SINGLE]['best']):>11} {fmt(r[SINGLE]['median'])}"
        for m in others:
            line += f" | {fmt(r[m]['best']):>16} {fmt(r[m]['median'])} {ratios(r[m], r[SINGLE])}"
        if r["error"]:
            line += "  FAILED"
        print(line)
    print("-" * len(header))
    t = result["totals"]
    line = f"{'total':>5} {t['queries']:>6} | {fmt(t[SINGLE]['best']):>11} {fmt(t[SINGLE]['median'])}"
    for m in others:
        line += f" | {fmt(t[m]['best']):>16} {fmt(t[m]['median'])} {ratios(t[m], t[SINGLE])}"
    print(line)
    print(
        "(seconds; ratio = median distributed / median single-node; cpu = the same for CPU seconds,"
        " coordinator and workers together; total = sum over queries)"
    )
    if any(t[m]["peak_mb"] for m in modes):
        print_memory(result, modes)


def print_memory(result: dict, modes: list[str]) -> None:
    """Peak resident MB per query and side, summed over the side's processes."""
    print()
    print(
        f"{'query':>5} "
        + " ".join(f"{m:>20}" for m in modes)
        + "   (peak resident MB, summed over processes)"
    )
    for q, r in [*result["queries"].items(), ("max", result["totals"])]:
        cells = []
        for m in modes:
            peak, single = r[m].get("peak_mb"), r[SINGLE].get("peak_mb")
            cells.append(
                "-" if peak is None else f"{peak:.0f}" + (f" ({peak / single:.2f})" if single else "")
            )
        print(f"{q:>5} " + " ".join(f"{c:>20}" for c in cells))


def ratios(run: dict, single: dict) -> str:
    """The time ratio and the CPU ratio of one mode against single-node."""
    cpu = ratio(run.get("cpu_median"), single.get("cpu_median")).strip()
    return f"{ratio(run['median'], single['median']):>6} {cpu:>5}"


def print_comparison(old: dict, new: dict, modes: list[str]) -> None:
    print(f"change against {old['meta'].get('timestamp')} (commit {old['meta'].get('commit')}), medians:")
    print(f"{'query':>5} " + " ".join(f"| {m:>11} {'old':>8} {'new':>8} {'change':>8}" for m in modes))

    def cell(o: dict | None, n: dict | None) -> str:
        om = o and o.get("median")
        nm = n and n.get("median")
        change = f"{(nm - om) / om * 100:+7.1f}%" if om and nm else "       -"
        return f"| {'':>11} {fmt(om)} {fmt(nm)} {change}"

    for q, r in new["queries"].items():
        o = old["queries"].get(q, {})
        print(f"{q:>5} " + " ".join(cell(o.get(m), r.get(m)) for m in modes))
    print(
        f"{'total':>5} " + " ".join(cell(old.get("totals", {}).get(m), new["totals"].get(m)) for m in modes)
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.iterations < 1:
        raise SystemExit("--iterations must be at least 1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
