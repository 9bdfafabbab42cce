"""Every script of `benchmarks/` runs end to end on tiny data, so none rots unseen (the suite
does not run them at their real scale). Each run checks its own answers against single-node
DataFusion; here it must finish and print what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = ["--sf", "0.01"]

# script, its arguments for a run of seconds (an output path is added where it writes one), and
# a line its report must hold
RUNS = [
    (
        "tpch.py",
        [*TINY, "--queries", "3", "--iterations", "1", "--warmup", "0", "--embedded", "--memory"],
        "total",
    ),
    ("breakdown.py", [*TINY, "--queries", "3,6", "--iterations", "1"], "stages running"),
    ("broadcast_joins.py", [*TINY, "--queries", "3", "--iterations", "1"], "q03"),
    ("feeds.py", [*TINY, "--iterations", "1", "--units", "4", "--unit-seconds", "0.01"], "feed"),
    ("memory.py", [*TINY, "--query", "3"], "peak"),
    ("fresh_memory.py", [*TINY, "--queries", "3"], "q03"),
    ("freed_memory.py", [*TINY, "--queries", "3", "--iterations", "1"], "eager"),
    (
        "micro.py",
        [*TINY, "--runs", "3", "--exchange-runs", "1", "--plan-runs", "1", "--no-processes"],
        "planning",
    ),
    ("scale_curve.py", [*TINY, "--queries", "1", "--iterations", "1", "--warmup", "0", "--memory"], "SF"),
    ("writes.py", [*TINY, "--iterations", "1"], "lineitem"),
    ("speculation.py", [*TINY, "--queries", "3", "--iterations", "1", "--min-seconds", "0"], "on slowed"),
    ("empty_exchanges.py", [*TINY, "--iterations", "1", "--warmup", "0"], "read nothing"),
    ("lakehouse.py", [*TINY, "--iterations", "1", "--warmup", "0"], "scans"),
    (
        "rolling_restart.py",
        [*TINY, "--workers", "2", "--add", "1", "--seconds", "2", "--queries", "3", "--forced"],
        "0 lost",
    ),
    ("dashboard_memory.py", [*TINY, "--rounds", "2", "--history-length", "30", "--explain"], "queries kept"),
    ("streaming.py", [*TINY, "--queries", "3", "--iterations", "1", "--warmup", "0"], "limit"),
    (
        "flight_sql.py",
        [*TINY, "--queries", "3", "--iterations", "1", "--warmup", "0"],
        "Flight SQL over in-process",
    ),
]
WRITES_OUTPUT = {
    "tpch.py",
    "freed_memory.py",
    "micro.py",
    "scale_curve.py",
    "writes.py",
    "speculation.py",
    "rolling_restart.py",
}


@pytest.mark.parametrize(("script", "args", "expected"), RUNS, ids=[r[0] for r in RUNS])
def test_benchmark_script_runs(script, args, expected, tmp_path):
    if script in WRITES_OUTPUT:
        args = [*args, "--output", str(tmp_path / "result.json")]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert expected.lower() in done.stdout.lower(), done.stdout[-3000:]


def test_covered_time_counts_overlaps_once(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from breakdown import covered

    assert covered([]) == 0.0
    assert covered([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == 3.0
    assert covered([(0.0, 4.0), (1.0, 2.0)]) == 4.0


def test_adaptive_script_checks_its_answers_and_writes_its_result(tmp_path):
    """`adaptive.py` at a tiny scale, its joins forced to shuffle (they would be broadcast or
    run on one node): every query runs on every side and matches single-node."""
    out = tmp_path / "result.json"
    settings = "broadcast_total_rows=0,broadcast_total_bytes=0,bytes_per_partition=4096"
    args = ["--rows", "20000", "--iterations", "1", "--warmup", "0", "--embedded", "--set", settings]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "adaptive.py"), *args, "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "DATAFUSION_DISTRIBUTED_DATA": str(tmp_path / "data")},
    )
    assert done.returncode == 0, f"adaptive.py failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "adaptive/static" in done.stdout, done.stdout[-3000:]
    result = json.loads(out.read_text())
    sides = ["single", "static", "adaptive", "embedded-static", "embedded-adaptive"]
    assert len(result["queries"]) >= 6
    for name, query in result["queries"].items():
        assert query["error"] is None, (name, query["error"])
        for side in sides:
            assert query[side]["median"] is not None and query[side]["peak_mb"] > 0, (name, side)
        if query["expected_join"]:
            assert "partitioned" in query["joins"]["static"], (name, query["joins"])
