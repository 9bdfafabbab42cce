"""`benchmarks/common.py`, which every benchmark script builds on: its options keep each
script's defaults, `--queries` and `--sf` are read and checked, and results land where asked."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the benchmarks import each other by name
    import common

    return common


def test_only_the_options_named_are_added_with_the_scripts_defaults(common):
    parser = argparse.ArgumentParser()
    common.add_common_args(
        parser, helps={"workers": "worker processes per cluster"}, sf=1.0, workers=3, queries=""
    )
    assert vars(parser.parse_args([])) == {"sf": 1.0, "workers": 3, "queries": ""}
    assert parser.parse_args(["--sf", "0.01", "--workers", "2"]).sf == 0.01
    text = parser.format_help()
    assert "TPC-H scale factor (default 1)" in text and "worker processes per cluster (default 3)" in text
    assert "(default: all 22)" in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--iterations", "1"])


def test_a_string_default_makes_sf_a_list(common):
    parser = argparse.ArgumentParser()
    common.add_common_args(parser, sf="0.1,1")
    assert common.scale_factors(parser.parse_args([]).sf) == [0.1, 1.0]
    for bad in ("x", "", "0,1"):
        with pytest.raises(SystemExit, match="--sf"):
            common.scale_factors(bad)


def test_query_numbers(common):
    assert common.query_numbers("") == list(range(1, 23))
    assert common.query_numbers("3,q18") == [3, 18]
    with pytest.raises(SystemExit, match="23"):
        common.query_numbers("1,23")
    assert common.query_numbers("", known=range(1, 8)) == list(range(1, 8))
    assert common.query_numbers("q7, 2", known={2: "a", 7: "b"}) == [7, 2]
    with pytest.raises(SystemExit, match="no such queries"):
        common.query_numbers("8", known=range(1, 8))
    with pytest.raises(SystemExit, match="--queries"):
        common.query_numbers("x")


def test_timing_and_summaries(common):
    seconds, value = common.timed(lambda: 42)
    assert value == 42 and seconds >= 0
    assert common.best_and_median([3.0, 1.0, 2.0]) == {"best": 1.0, "median": 2.0, "runs": [3.0, 1.0, 2.0]}
    assert common.best_and_median([]) == {"best": None, "median": None, "runs": []}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_peak_memory_of_this_process(common):
    common.reset_peak_rss(["self"])
    assert common.peak_rss_mb([]) == common.rss_mb() >= common.rss_mb("self", "VmRSS") > 0
    assert common.cpu_seconds([]) > 0


def test_results_go_to_output_or_a_stamped_default(common, tmp_path):
    assert common.result_path(str(tmp_path / "r.json"), "tpch") == tmp_path / "r.json"
    default = common.result_path(None, "tpch-sf1")
    assert default.parent == common.RESULTS_DIR and default.name.startswith("tpch-sf1-")
    out = tmp_path / "new" / "r.json"
    common.write_json(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
