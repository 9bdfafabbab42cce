"""TPC-H on workers that share nothing, behind a simulated network, next to single-node
DataFusion and workers that share a spool folder.

    python benchmarks/shared_nothing.py --sf 1 --networks unlimited,1gbit/1ms,100mbit/5ms

Sides, run interleaved query by query (the order alternating between iterations), every
distributed answer checked against single-node's:

- ``single``: a plain ``SessionContext`` with ``target_partitions = workers * partitions_per_task``;
- ``shared``: ``LocalCluster(workers)``, whose workers read each other's spools in place
  (exchange files uncompressed);
- ``loopback``: ``LocalCluster(workers, share_spools=False)`` on 127.0.0.2, 127.0.0.3, ...: every
  exchange over Flight, lz4-compressed, but no network in the way;
- ``net <setting>`` for each of ``--networks``: the same shared-nothing workers, each in a
  network namespace of its own behind a rate-limited veth pair and a delaying proxy
  (``netsim.py``); the coordinator stays in this namespace. One set of worker processes serves
  every setting: the links are re-shaped before each run.

Per query it reports the median time of each side, the bytes the query's tasks read from
exchanges (``raw``: the uncompressed files of ``shared``; ``lz4``: the files of the
shared-nothing sides) and the bytes that crossed the network (``fetched``: files copied from
another worker or to the coordinator), and for each rate-limited setting the time those bytes
need at that rate over one link (``fetched / rate``) and over every worker's link at once
(``/ workers``).

Without namespaces (not Linux, not root, no iproute2: the reason is printed; or
``--no-namespaces``) the ``net`` sides are not run and a model takes their place:
``time(loopback) + fetched / (workers * rate) + stages * 2 * (2 * delay)``: the fetched bytes
spread over every worker's link at once, and per stage at least its task call and one fetch,
each a round trip of twice the one-way delay. The model is printed beside the measured times
too, to see how far it holds.

Everything it creates (namespaces, veth pairs, proxies, worker processes, spools) is removed at
the end, also on Ctrl-C, SIGTERM or SIGHUP. Results are written as JSON to
``benchmarks/results/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import datafusion
import pyarrow as pa
from common import (
    add_common_args,
    add_output_arg,
    best_and_median,
    git_commit,
    query_numbers,
    result_path,
    utc_timestamp,
    write_json,
)
from datafusion import SessionConfig, SessionContext
from netsim import NamespaceCluster, NetworkSetting, namespaces_available, remove_leftovers

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

SINGLE, SHARED, LOOPBACK = "single", "shared", "loopback"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; `networks` becomes a list of NetworkSetting."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(
        p,
        helps={
            "workers": "worker processes per cluster",
            "iterations": "timed runs of each query on each side",
        },
        sf=1.0,
        parts=4,
        workers=3,
        partitions_per_task=1,
        iterations=3,
        warmup=1,
        queries="",
    )
    p.add_argument(
        "--networks",
        default="unlimited,1gbit/1ms,100mbit/5ms",
        help="simulated networks: unlimited or <rate>[k|m|g]bit[/<one-way delay>ms], comma-separated "
        "(default unlimited,1gbit/1ms,100mbit/5ms)",
    )
    p.add_argument("--no-namespaces", action="store_true", help="do not simulate a network: model it")
    p.add_argument(
        "--compression",
        default="auto",
        choices=["auto", "lz4", "zstd", "none"],
        help="exchange codec of every distributed side (default auto: none for shared, lz4 for the others)",
    )
    add_output_arg(p)
    p.add_argument("--report", metavar="FILE.json", help="print the tables of an earlier result, run nothing")
    args = p.parse_args(argv)
    if args.iterations < 1 or args.warmup < 0 or args.workers < 1:
        p.error("--iterations and --workers must be at least 1, --warmup at least 0")
    try:
        args.networks = [NetworkSetting.parse(s) for s in args.networks.split(",") if s.strip()]
    except ValueError as exc:
        p.error(str(exc))
    args.query_numbers = query_numbers(args.queries)
    return args


def net_side(setting: NetworkSetting) -> str:
    """The name of the side run over `setting`."""
    return f"net {setting.name}"


@dataclass
class Runs:
    """One side's runs of one query: seconds, and the exchange bytes of its last run."""

    seconds: list[float] = field(default_factory=list)
    read_bytes: int | None = None
    fetched_bytes: int | None = None
    stages: int | None = None

    def summary(self) -> dict:
        """Median and best seconds, and the bytes."""
        return {
            **best_and_median(self.seconds),
            "read_bytes": self.read_bytes,
            "fetched_bytes": self.fetched_bytes,
            "stages": self.stages,
        }


def modelled_seconds(
    loopback_seconds: float, fetched_bytes: int, stages: int, setting: NetworkSetting, workers: int
) -> float:
    """The model of a query's time over `setting`, from its run over loopback: the fetched bytes
    spread over the workers' links, each at the link's rate (every worker sends and receives
    on its own link at once), plus two round trips (a task call and a fetch) per stage."""
    rate = setting.bytes_per_second
    transfer = 0.0 if rate is None else fetched_bytes / (workers * rate)
    return loopback_seconds + transfer + stages * 2 * (2 * setting.delay_ms / 1000.0)


def run_distributed(dctx: DistributedContext, sql: str) -> tuple[pa.Table, int, int, int]:
    """The table of `sql`, the bytes its tasks read from exchanges and fetched, and its stages."""
    df = dctx.sql(sql)
    table = df.to_arrow_table()
    stages = df.metrics.stages.values()
    read = sum(s.read_bytes for s in stages)
    fetched = sum(s.fetched_bytes for s in stages)
    return table, read, fetched, len(df.distributed_plan().stages)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; the exit status (1 if an answer differed or a query failed)."""
    simulate = not args.no_namespaces
    why_not = None if not simulate else namespaces_available()
    if why_not:
        print(f"no simulated network ({why_not}): the network sides are modelled", flush=True)
        simulate = False
    target_partitions = args.workers * args.partitions_per_task
    print(f"generating / reusing TPC-H SF {args.sf:g} with {args.parts} files per table ...", flush=True)
    data = tpch_data(args.sf, args.parts)
    single = SessionContext(SessionConfig().with_target_partitions(target_partitions))
    register_tpch(single, data)
    codec = None if args.compression == "none" else args.compression
    config = DistributedConfig(partitions_per_task=args.partitions_per_task, compression=codec)
    sides = [SINGLE, SHARED, LOOPBACK, *([net_side(s) for s in args.networks] if simulate else [])]
    runs = {n: {side: Runs() for side in sides} for n in args.query_numbers}
    errors: dict[int, str] = {}

    with ExitStack() as stack:
        if simulate:
            for name in remove_leftovers():
                print(f"removed {name}, left by an earlier run", flush=True)
        contexts: dict[str, DistributedContext] = {}

        def context(resolver) -> DistributedContext:
            ctx = SessionContext()
            register_tpch(ctx, data)
            return stack.enter_context(DistributedContext(ctx, workers=resolver, config=config))

        contexts[SHARED] = context(stack.enter_context(LocalCluster(args.workers)))
        hosts = [f"127.0.0.{i + 2}" for i in range(args.workers)]
        loopback = stack.enter_context(LocalCluster(args.workers, share_spools=False, hosts=hosts))
        contexts[LOOPBACK] = context(loopback)
        namespaced = None
        if simulate:
            namespaced = stack.enter_context(NamespaceCluster(args.workers, loopback.auth_token))
            net = context(namespaced)
            for setting in args.networks:
                contexts[net_side(setting)] = net
        settings = {net_side(s): s for s in args.networks}
        print(
            f"{len(args.query_numbers)} queries x {args.iterations} iterations (+{args.warmup} warm-up); "
            f"{args.workers} workers x {args.partitions_per_task} partition(s) per task; sides: {', '.join(sides)}",
            flush=True,
        )
        for n in args.query_numbers:
            sql = tpch_query(n)
            try:
                for i in range(args.warmup + args.iterations):
                    answers: dict[str, pa.Table] = {}
                    for side in sides if i % 2 == 0 else sides[::-1]:
                        if side in settings:
                            namespaced.shape(settings[side])
                        started = time.perf_counter()
                        if side == SINGLE:
                            table = single.sql(sql).to_arrow_table()
                            seconds = time.perf_counter() - started
                        else:
                            table, read, fetched, stages = run_distributed(contexts[side], sql)
                            seconds = time.perf_counter() - started
                            record = runs[n][side]
                            record.read_bytes, record.fetched_bytes, record.stages = read, fetched, stages
                        if i >= args.warmup:
                            runs[n][side].seconds.append(seconds)
                        answers[side] = table
                    for side in sides[1:]:
                        assert_tables_equal(answers[side], answers[SINGLE], sql=sql)
            except Exception as exc:  # keep going: one broken query must not hide the others
                errors[n] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
            print_query_line(n, runs[n], n in errors)
    result = build_result(args, sides, runs, errors, simulate, why_not)
    print()
    print_tables(result)
    out = result_path(args.output, f"shared-nothing-sf{args.sf:g}-w{args.workers}")
    write_json(out, result)
    print(f"\nwrote {out}")
    if errors:
        print(f"\n{len(errors)} query(ies) failed or gave a different answer: {sorted(errors)}")
        return 1
    return 0


def print_query_line(n: int, runs: dict[str, Runs], failed: bool) -> None:
    """One line of progress per query."""
    times = "  ".join(f"{side} {statistics.median(r.seconds):.3f}s" for side, r in runs.items() if r.seconds)
    print(f"  q{n:02d}: {times}{'  FAILED' if failed else ''}", flush=True)


def build_result(
    args: argparse.Namespace,
    sides: list[str],
    runs: dict[int, dict[str, Runs]],
    errors: dict[int, str],
    simulate: bool,
    why_not: str | None,
) -> dict:
    """The JSON result: settings, per query each side's summary, the model, and totals."""
    queries = {}
    for n, by_side in runs.items():
        entry = {side: by_side[side].summary() for side in sides}
        entry["error"] = errors.get(n)
        queries[f"q{n:02d}"] = entry
    ok = [q for q, e in queries.items() if not e["error"] and all(e[s]["median"] is not None for s in sides)]
    totals = {side: sum(queries[q][side]["median"] for q in ok) for side in sides}
    for key in ("read_bytes", "fetched_bytes"):
        totals[key] = {side: sum(queries[q][side][key] or 0 for q in ok) for side in sides[1:]}
    totals["queries"] = len(ok)
    result = {
        "meta": {
            "timestamp": utc_timestamp(),
            "commit": git_commit(),
            "scale_factor": args.sf,
            "parts": args.parts,
            "workers": args.workers,
            "partitions_per_task": args.partitions_per_task,
            "iterations": args.iterations,
            "warmup": args.warmup,
            "networks": [s.name for s in args.networks],
            "compression": args.compression,
            "simulated": simulate,
            "not_simulated_because": why_not,
            "datafusion": datafusion.__version__,
            "pyarrow": pa.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "sides": sides,
        "queries": queries,
        "totals": totals,
    }
    return add_model(result)


def add_model(result: dict) -> dict:
    """`result` with each query's modelled time over every network setting (from its loopback
    run) and their totals over the queries that succeeded everywhere."""
    networks = [NetworkSetting.parse(s) for s in result["meta"]["networks"]]
    workers = result["meta"]["workers"]
    for entry in result["queries"].values():
        loop = entry[LOOPBACK]
        if loop["median"] is not None and loop["fetched_bytes"] is not None:
            entry["model"] = {
                net_side(s): modelled_seconds(
                    loop["median"], loop["fetched_bytes"], loop["stages"], s, workers
                )
                for s in networks
            }
    ok = [
        e for e in result["queries"].values()
        if not e["error"] and "model" in e and all(e[s]["median"] is not None for s in result["sides"])
    ]  # fmt: skip
    result["totals"]["model"] = {net_side(s): sum(e["model"][net_side(s)] for e in ok) for s in networks}
    return result


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_tables(result: dict) -> None:
    """Times per side, then bytes and what they cost at each rate, as Markdown tables."""
    sides, networks = result["sides"], [NetworkSetting.parse(s) for s in result["meta"]["networks"]]
    shown = [*sides, *(f"model {net_side(s)}" for s in networks)]
    print("| query | stages | " + " | ".join(shown) + " |")
    print("| --- " * (len(shown) + 2) + "|")
    rows = list(result["queries"].items()) + [("total", None)]
    for q, entry in rows:
        if entry is None:
            cells = [_s(result["totals"][s]) for s in sides]
            cells += [_s(result["totals"]["model"][net_side(s)]) for s in networks]
            print("| **total** | | " + " | ".join(cells) + " |")
            continue
        cells = [_s(entry[s]["median"]) for s in sides]
        cells += [_s(entry.get("model", {}).get(net_side(s))) for s in networks]
        print(
            f"| {q} | {entry[LOOPBACK]['stages'] or '-'} | "
            + " | ".join(cells)
            + (" FAILED" if entry["error"] else "")
            + " |"
        )
    print("\n(median seconds; model: loopback + fetched / (workers * rate) + 2 round trips per stage)\n")
    limited = [s for s in networks if s.rate_mbit is not None]
    workers = result["meta"]["workers"]
    codec = result["meta"].get("compression", "auto")
    files = {"auto": "lz4", "none": "uncompressed"}.get(codec, codec)
    header = f"| query | raw MB | {files} MB | fetched MB |" + "".join(
        f" fetched / {s.name} | / {workers} links |" for s in limited
    )
    print(header)
    print("| --- " * (4 + 2 * len(limited)) + "|")
    for q, entry in rows:
        source = (
            result["totals"]
            if entry is None
            else {
                "read_bytes": {s: entry[s]["read_bytes"] for s in sides[1:]},
                "fetched_bytes": {s: entry[s]["fetched_bytes"] for s in sides[1:]},
            }
        )
        fetched = source["fetched_bytes"][LOOPBACK]
        cells = [_mb(source["read_bytes"][SHARED]), _mb(source["read_bytes"][LOOPBACK]), _mb(fetched)]
        for s in limited:
            seconds = None if fetched is None else fetched / s.bytes_per_second
            cells += [_s(seconds), _s(None if seconds is None else seconds / workers)]
        print(f"| {'**total**' if entry is None else q} | " + " | ".join(cells) + " |")
    print(
        "\n(raw: exchange files read, uncompressed, shared spools; then the same read by workers sharing nothing;"
    )
    print(" fetched: the part that crossed the network; fetched / rate: seconds those bytes take at the")
    print(" rate over one link, and over every worker's link at once)")


def _stop_by_signal(signum: int, frame) -> None:
    """SIGTERM or SIGHUP: unwind like Ctrl-C, so every `finally` removes what the run made."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        print_tables(add_model(json.loads(Path(args.report).read_text())))
        return 0
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_by_signal)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
