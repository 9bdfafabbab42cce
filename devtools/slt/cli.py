"""Distributed sqllogictest: run DataFusion's `.slt` files in DataFusion and distributed, and
report every record where the two disagree.

    python -m devtools.slt [FILES OR FOLDERS] [--forced]
        [--cluster embedded|local:N] [--mode distributed|roundtrip] [--report PATH]

With no paths, the whole corpus ($DATAFUSION_SLT_DIR, default `../shared/datafusion-slt` from
the repository root) runs. `--mode roundtrip` compares DataFusion with DataFusion running its
plans decoded from their own bytes instead: it finds what DataFusion's plan serialisation
loses, which a distributed plan loses too. Each record is classified (see `compare`); the
per-file table and the totals are printed, and `--report` writes every record that is not
equal as JSON. Exits 1 when any record is distributed_wrong, distributed_only_error or
not_serialisable, or when a file could not be run.

How the files run (engines, working directory, scratch files) is described in `runner`.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from .compare import Category, first_line
from .runner import (
    FileResult,
    RecordResult,
    RunOptions,
    default_corpus,
    run_files,
    slt_files,
)

__all__ = ["causes", "failure_cause", "main", "report", "summary_table", "totals"]

# Categories in the order the table shows them, with short column titles.
COLUMNS = (
    (Category.EQUAL, "equal"),
    (Category.DISTRIBUTED_WRONG, "wrong"),
    (Category.DISTRIBUTED_ONLY_ERROR, "only_err"),
    (Category.NOT_SERIALISABLE, "not_ser"),
    (Category.KEPT_ON_ONE_NODE, "kept"),
    (Category.BOTH_ERROR, "both_err"),
    (Category.NONDETERMINISTIC, "nondet"),
    (Category.EXPLAIN, "explain"),
    (Category.SKIPPED, "skipped"),
)


def totals(results: Sequence[FileResult]) -> Counter:
    """Records per category over all files, plus `expected_mismatch` and `file_errors`."""
    total: Counter = Counter()
    for result in results:
        total.update(result.counts)
    total["file_errors"] = sum(r.error is not None for r in results)
    total["files_aborted"] = sum(r.aborted is not None for r in results)
    return total


def summary_table(results: Sequence[FileResult]) -> str:
    """One line per file (counts per category; `multi`: records the candidate ran as several
    tasks; `stream`: records some of whose exchanges streamed; `expect`: DataFusion differs from
    the file's text; seconds in DataFusion, in the candidate and in all), then the totals."""
    width = max([len(r.file) for r in results] + [5])
    header = f"{'file':<{width}} " + " ".join(f"{title:>8}" for _, title in COLUMNS)
    header += f" {'multi':>7} {'stream':>7} {'expect':>7} {'df_s':>7} {'cand_s':>7} {'wall_s':>7}"
    lines = [header, "-" * len(header)]

    def row(name: str, counts: Counter, ref_s: float, cand_s: float, wall_s: float, note: str) -> str:
        cells = " ".join(f"{counts.get(category.value, 0):>8}" for category, _ in COLUMNS)
        times = f"{ref_s:>7.1f} {cand_s:>7.1f} {wall_s:>7.1f}"
        extra = f"{counts.get('multi_task', 0):>7} {counts.get('streamed', 0):>7} {counts.get('expected_mismatch', 0):>7}"
        return f"{name:<{width}} {cells} {extra} {times}{note}"

    for r in results:
        note = (
            "  ERROR: " + r.error.splitlines()[0]
            if r.error
            else ("  ABORTED: " + r.aborted if r.aborted else "")
        )
        lines.append(row(r.file, r.counts, r.reference_seconds, r.candidate_seconds, r.seconds, note))
    lines.append("-" * len(header))
    lines.append(
        row(
            "TOTAL",
            totals(results),
            sum(r.reference_seconds for r in results),
            sum(r.candidate_seconds for r in results),
            sum(r.seconds for r in results),
            "",
        )
    )
    return "\n".join(lines)


def failure_cause(record: RecordResult) -> str:
    """A short text that failures with one cause share: the candidate's error (numbers and
    the dump of a plan left out), or for a wrong result the file and the kind of difference."""
    if record.category is Category.DISTRIBUTED_WRONG:
        if record.candidate_error is None and record.reference_error is not None:
            what = "DataFusion raised, the candidate returned a result: " + first_line(record.reference_error)
        else:
            what = first_line(record.detail).split(":", 1)[0]
        text = f"wrong result in {record.file}: {what}"
    else:
        text = first_line(record.candidate_error or record.detail)
    text = re.sub(r"(Plan: \w+).*", r"\1", text)  # keep the node's name, not its dump
    text = re.sub(r"\d+", "N", text)
    return text[:200]


def causes(results: Sequence[FileResult]) -> list[dict]:
    """Failures (wrong, candidate-only errors, not serialisable) grouped by `failure_cause`,
    most frequent first: count, where they are, and the first one in full."""
    groups: dict[tuple[str, str], list[RecordResult]] = {}
    for result in results:
        for record in result.failures:
            groups.setdefault((record.category.value, failure_cause(record)), []).append(record)
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return [
        {
            "category": category,
            "cause": cause,
            "count": len(records),
            "where": [f"{r.file}:{r.line}" for r in records],
            "example": _record_json(records[0]),
        }
        for (category, cause), records in ordered
    ]


def _record_json(record: RecordResult) -> dict:
    data = asdict(record)
    data["category"] = record.category.value
    data["reference_seconds"] = round(record.reference_seconds, 4)
    data["candidate_seconds"] = round(record.candidate_seconds, 4)
    return data


def report(results: Sequence[FileResult], options: RunOptions, seconds: float) -> dict:
    """The JSON report: options, totals, per-file counts and times, every record that is not
    `equal` or `explain`, and every record whose DataFusion outcome differs from the file."""
    reference, candidate = (
        ("plan", "roundtrip") if options.mode == "roundtrip" else ("datafusion", "distributed")
    )
    return {
        "options": asdict(options),
        "label": options.label(),
        "engines": {"reference": reference, "candidate": candidate},
        "seconds": round(seconds, 1),
        "totals": dict(totals(results)),
        "causes": causes(results),
        "files": [
            {
                "file": r.file,
                "counts": dict(r.counts),
                "seconds": round(r.seconds, 2),
                "reference_seconds": round(r.reference_seconds, 2),
                "candidate_seconds": round(r.candidate_seconds, 2),
                "error": r.error,
                "aborted": r.aborted,
            }
            for r in results
        ],
        "records": [
            _record_json(record)
            for r in results
            for record in r.records
            if record.category not in (Category.EQUAL, Category.EXPLAIN)
        ],
        "expected_mismatches": [
            {"file": record.file, "line": record.line, "note": record.expected_mismatch}
            for r in results
            for record in r.records
            if record.expected_mismatch is not None
        ],
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.slt",
        description="Run DataFusion sqllogictest files in DataFusion and distributed, and compare.",
    )
    parser.add_argument("paths", nargs="*", help=".slt files or folders (default: the whole corpus)")
    parser.add_argument(
        "--cluster", default="embedded", help="embedded (default) or local:N worker processes"
    )
    parser.add_argument("--forced", action="store_true", help="split every stage and shuffle every join")
    parser.add_argument("--mode", choices=("distributed", "roundtrip"), default="distributed")
    parser.add_argument(
        "--exchange", choices=("auto", "stream", "spool"), default="auto", help="DistributedConfig.exchange"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per statement (default 60)")
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    parser.add_argument("--corpus", type=Path, help="the corpus folder (default: $DATAFUSION_SLT_DIR)")
    parser.add_argument("--quiet", action="store_true", help="no progress line per file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (see the module docstring); return the exit code."""
    args = _parser().parse_args(argv)
    # Repeated for every task that reads part of a scan's files (the scan keeps its declared
    # partitioning only when it reads them all): noise in a run of thousands of queries.
    logging.getLogger("datafusion_datasource.file_scan_config").setLevel(logging.ERROR)
    corpus = args.corpus or default_corpus()
    if not corpus.is_dir():
        print(f"no sqllogictest corpus at {corpus} (set DATAFUSION_SLT_DIR)", file=sys.stderr)
        return 2
    options = RunOptions(
        mode=args.mode, cluster=args.cluster, forced=args.forced, timeout=args.timeout, exchange=args.exchange
    )
    paths = slt_files(args.paths or [corpus])
    start = time.perf_counter()

    def progress(index: int, result: FileResult) -> None:
        if args.quiet:
            return
        counts = result.counts
        bad = {c.value: counts[c.value] for c, _ in COLUMNS[1:4] if counts[c.value]}
        state = f" ERROR {result.error.splitlines()[0]}" if result.error else ""
        state += f" ABORTED {result.aborted}" if result.aborted else ""
        print(
            f"[{index + 1}/{len(paths)}] {result.file}: {sum(counts[c.value] for c, _ in COLUMNS)} records "
            f"{bad or ''} {result.seconds:.1f}s{state}",
            flush=True,
        )

    results = run_files(paths, options, corpus, progress)
    seconds = time.perf_counter() - start
    print(summary_table(results))
    for group in causes(results):
        where = ", ".join(group["where"][:3]) + (", ..." if group["count"] > 3 else "")
        print(f"{group['count']:>5} {group['category']}: {group['cause']}  [{where}]")
    print(f"{options.label()}: {len(results)} files in {seconds:.0f} s")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report(results, options, seconds), indent=1, default=str))
        print(f"report: {args.report}")
    total = totals(results)
    failed = sum(total[c.value] for c in (Category.DISTRIBUTED_WRONG, Category.DISTRIBUTED_ONLY_ERROR))
    failed += total[Category.NOT_SERIALISABLE.value] + total["file_errors"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
