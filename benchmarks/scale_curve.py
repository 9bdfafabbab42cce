"""The TPC-H side-by-side suite at several scale factors: how distribution's cost grows with the work.

    python benchmarks/scale_curve.py --sf 1,3 --embedded --memory
    python benchmarks/scale_curve.py --sf 10 --memory --iterations 1 --warmup 0   # SF 10: ~4 GB of disk

For each scale factor, `tpch.py` runs in a fresh process (data generated on first use, as
`tpch.py` does) with the options given here, so that one scale factor's memory does not carry
into the next; its result JSON is kept next to the curve's. The curve is one JSON in
`benchmarks/results/` (git-ignored) holding, per scale factor and side, the suite total (sum of
per-query medians), its ratio to single-node, the largest per-query ratio, and, with `--memory`,
the largest per-query peak resident memory (summed over the side's processes, see `tpch.py`);
it is printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common import add_common_args, add_output_arg, result_path, scale_factors, write_json

TPCH = Path(__file__).resolve().parent / "tpch.py"
SINGLE = "single"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, sf="1,3", workers=2, iterations=3, warmup=1, queries="")
    p.add_argument("--embedded", action="store_true", help="also run over the in-process cluster")
    p.add_argument("--memory", action="store_true", help="record peak resident memory (Linux)")
    add_output_arg(p, "the curve's JSON")
    return p.parse_args(argv)


def run_suite(args: argparse.Namespace, sf: float, output: Path) -> dict:
    """Run `tpch.py` at `sf` in a fresh process and return its result JSON."""
    command = [
        sys.executable,
        str(TPCH),
        "--sf",
        f"{sf:g}",
        "--workers",
        str(args.workers),
        "--iterations",
        str(args.iterations),
        "--warmup",
        str(args.warmup),
        "--output",
        str(output),
    ]
    if args.queries:
        command += ["--queries", args.queries]
    if args.embedded:
        command.append("--embedded")
    if args.memory:
        command.append("--memory")
    print("$", " ".join(command[1:]), flush=True)
    finished = subprocess.run(command, check=False)
    if not output.exists():
        raise SystemExit(f"tpch.py at SF {sf:g} wrote no result (exit {finished.returncode})")
    result = json.loads(output.read_text())
    result["exit_code"] = finished.returncode
    return result


def point(result: dict) -> dict:
    """One scale factor's row of the curve: per side, total, ratio, worst query, peak memory."""
    totals = result["totals"]
    single = totals[SINGLE]["median"]
    sides = {}
    for mode, total in totals.items():
        if not isinstance(total, dict):
            continue
        ratios = [
            r[mode]["median"] / r[SINGLE]["median"]
            for r in result["queries"].values()
            if not r["error"] and r[mode]["median"] and r[SINGLE]["median"]
        ]
        sides[mode] = {
            "total_s": total["median"],
            "ratio": total["median"] / single if single and total["median"] else None,
            "worst_query_ratio": max(ratios) if ratios else None,
            "peak_mb": total.get("peak_mb"),
        }
    return {"queries": totals["queries"], "all_answers_matched": result["exit_code"] == 0, "sides": sides}


def print_curve(curve: dict) -> None:
    """The curve as a Markdown table: one row per scale factor and side."""
    print("| SF | side | suite (s) | ratio | worst query | peak MB (x single) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for sf, row in curve["points"].items():
        single_peak = row["sides"][SINGLE]["peak_mb"]
        for mode, side in row["sides"].items():
            peak = side["peak_mb"]
            memory = "-" if peak is None else f"{peak:.0f}"
            if peak is not None and single_peak:
                memory += f" ({peak / single_peak:.2f})"
            ratio = "-" if side["ratio"] is None or mode == SINGLE else f"{side['ratio']:.2f}"
            worst = (
                "-"
                if side["worst_query_ratio"] is None or mode == SINGLE
                else f"{side['worst_query_ratio']:.2f}"
            )
            print(f"| {sf} | {mode} | {side['total_s']:.2f} | {ratio} | {worst} | {memory} |")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = result_path(args.output, f"scale-curve-w{args.workers}")
    out.parent.mkdir(parents=True, exist_ok=True)
    curve: dict = {
        "workers": args.workers,
        "iterations": args.iterations,
        "warmup": args.warmup,
        "points": {},
    }
    for sf in scale_factors(args.sf):
        result = run_suite(args, sf, out.with_name(f"{out.stem}-sf{sf:g}.json"))
        curve["points"][f"{sf:g}"] = point(result)
        write_json(out, curve)  # kept as it grows: SF 10 takes long
    print()
    print_curve(curve)
    print(f"\nwrote {out}")
    return 0 if all(p["all_answers_matched"] for p in curve["points"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
