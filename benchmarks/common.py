"""What the benchmark scripts share: their common options, the TPC-H query numbers they take,
timing, peak memory and the JSON files their results go to.

The scripts import it by name (``from common import ...``), as they import each other: run as
``python benchmarks/<script>.py``, their folder comes first on ``sys.path``. Only the standard
library is imported here, so that a script whose measurements run in child processes
(``fresh_memory.py``, ``scale_curve.py``) loads no DataFusion for it.

A script importing it runs with the allocator setting the library's worker processes start with
(``MIMALLOC_PURGE_DECOMMITS=0``, ``datafusion_distributed/common/allocator.py``): mimalloc reads
it only as a process starts, so a script started without the variable is started again with it
(a script run by its path; importing this module does not).
Single-node DataFusion and the embedded cluster in the script's process then compare like for
like with the workers; ``MIMALLOC_PURGE_DECOMMITS=1 python benchmarks/...`` runs every process
at mimalloc's own default.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# -- the allocator ------------------------------------------------------------------------------

ALLOCATOR_VARIABLE = "MIMALLOC_PURGE_DECOMMITS"
_RUN_AS_SCRIPT = Path(sys.argv[0]).resolve().parent == Path(__file__).resolve().parent
if _RUN_AS_SCRIPT and ALLOCATOR_VARIABLE not in os.environ:  # as the library's worker processes start
    os.environ[ALLOCATOR_VARIABLE] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

# -- options ------------------------------------------------------------------------------------

#: The options several scripts take, by destination: their type and what they set.
COMMON_OPTIONS: dict[str, tuple[type, str]] = {
    "sf": (float, "TPC-H scale factor"),
    "parts": (int, "Parquet files per table"),
    "workers": (int, "worker processes"),
    "partitions_per_task": (int, "partitions per task"),
    "iterations": (int, "timed runs of each query"),
    "warmup": (int, "untimed runs of each query first"),
    "queries": (str, "comma-separated query numbers"),
}


def add_common_args(
    parser: argparse.ArgumentParser, helps: Mapping[str, str] | None = None, **defaults: Any
) -> None:
    """Add the shared options named in `defaults` (`sf=1.0, workers=2, ...`), each with this
    script's default, in the order given; `helps` rewords an option for this script.

    The same names, types and help everywhere; a script takes only the options it uses. `--sf`
    with a string default ("0.1,1") takes a comma-separated list (see `scale_factors`), and an
    empty `--queries` means all 22."""
    for dest, default in defaults.items():
        kind, text = COMMON_OPTIONS[dest]
        if dest == "sf" and isinstance(default, str):
            kind, text = str, "comma-separated TPC-H scale factors"
        text = (helps or {}).get(dest, text)
        if default == "":
            shown = " (default: all 22)"  # only --queries has an empty default
        else:
            shown = f" (default {default:g})" if isinstance(default, float) else f" (default {default})"
        parser.add_argument("--" + dest.replace("_", "-"), type=kind, default=default, help=text + shown)


def add_pin_arg(parser: argparse.ArgumentParser) -> None:
    """`--pin` / `--no-pin` (default on): confine each worker process to a core of its own."""
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run each worker process on a core of its own from its start (Linux), as separate "
        "one-core machines would; single-node and the coordinator use every core (default on)",
    )


def worker_cores(workers: int, pin: bool) -> list[list[int]] | None:
    """A core of its own for each of `workers` worker processes, round robin over the cores this
    process may use (`LocalCluster(worker_cpus=...)`); None unpinned or where affinity is unknown."""
    if not pin or not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return [[cores[i % len(cores)]] for i in range(workers)]


def scale_factors(spec: str) -> list[float]:
    """`1,3,10` as numbers; a scale factor must be positive."""
    try:
        values = [float(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--sf takes comma-separated numbers, got {spec!r}") from None
    if not values or any(v <= 0 for v in values):
        raise SystemExit(f"--sf takes positive scale factors, got {spec!r}")
    return values


# -- TPC-H queries ------------------------------------------------------------------------------


def query_numbers(spec: str, known: Collection[int] | None = None) -> list[int]:
    """`--queries` as query numbers ("3,18" or "q3,q18"; empty: all), checked against `known`,
    by default the TPC-H queries' (a script with queries of its own passes their numbers)."""
    from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS  # imports no DataFusion

    what = "TPC-H queries" if known is None else "queries"
    known = TPCH_QUERY_NUMBERS if known is None else known
    if not spec.strip():
        return list(known)
    try:
        numbers = [int(s.strip().removeprefix("q")) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--queries takes comma-separated query numbers, got {spec!r}") from None
    bad = [n for n in numbers if n not in known]
    if bad:
        raise SystemExit(f"no such {what}: {bad}")
    return numbers


# -- time ---------------------------------------------------------------------------------------


def timed(run: Callable[[], T]) -> tuple[float, T]:
    """Wall seconds of `run()`, and what it returned."""
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def process_times(pid: int) -> tuple[float, float] | None:
    """User and system CPU seconds of another process so far (Linux /proc), None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of another process so far (Linux /proc), None if unknown."""
    times = process_times(pid)
    return None if times is None else sum(times)


def cpu_seconds(pids: list[int]) -> float | None:
    """CPU seconds of this process and of `pids` so far; None if any is unknown."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    others = [process_cpu_seconds(pid) for pid in pids]
    if any(o is None for o in others):
        return None
    return usage.ru_utime + usage.ru_stime + sum(others)


def timed_with_usage(
    run: Callable[[], T], pids: list[int], memory: bool = False
) -> tuple[float, float | None, float | None, T]:
    """Wall seconds, CPU seconds (this process and `pids`), peak resident MB of this process
    and `pids` together (with `memory`, else None) and what `run()` returned."""
    if memory:
        reset_peak_rss(["self", *pids])
    cpu_start = cpu_seconds(pids)
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    cpu_end = cpu_seconds(pids)
    cpu = None if cpu_start is None or cpu_end is None else cpu_end - cpu_start
    return seconds, cpu, peak_rss_mb(pids) if memory else None, result


def best_and_median(seconds: list[float]) -> dict:
    """The best and the median of some runs' seconds (None without runs), and the runs."""
    return {
        "best": min(seconds) if seconds else None,
        "median": statistics.median(seconds) if seconds else None,
        "runs": seconds,
    }


# -- memory (Linux /proc) -----------------------------------------------------------------------


def rss_mb(pid: int | str = "self", field: str = "VmHWM") -> float:
    """A process's peak (VmHWM) or current (VmRSS) resident set in MB, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc status")


def peak_rss_mb(pids: list[int]) -> float:
    """This process's peak resident memory plus that of `pids`, in MB, since the last reset."""
    return sum(rss_mb(pid) for pid in ["self", *pids])


def reset_peak_rss(pids: list[int | str]) -> None:
    """Start the peak resident set (VmHWM) of each process ("self": this one) over from its
    current size, so that the next reading is the peak of what runs in between."""
    for pid in pids:
        with open(f"/proc/{pid}/clear_refs", "w") as refs:
            refs.write("5")


# -- results ------------------------------------------------------------------------------------


def add_output_arg(parser: argparse.ArgumentParser, what: str = "the result JSON") -> None:
    """`--output FILE.json`: where the result goes instead of `result_path`'s default."""
    parser.add_argument("--output", metavar="FILE.json", help=f"where to write {what}")


def result_path(output: str | None, name: str) -> Path:
    """`--output` if given, else `results/<name>-<local time>.json` (git-ignored)."""
    if output:
        return Path(output)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return RESULTS_DIR / f"{name}-{stamp}.json"


def write_json(path: Path, result: dict) -> None:
    """Write `result` to `path` as indented JSON, making its folder if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def utc_timestamp() -> str:
    """Now, in UTC to the second: when a result was measured."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def git_commit() -> str | None:
    """The checked-out commit, with "-dirty" when tracked files have changed."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=Path(__file__).resolve().parent, check=True
        ).stdout.strip()

    try:
        return git("rev-parse", "--short", "HEAD") + (
            "-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
        )
    except (OSError, subprocess.CalledProcessError):
        return None
