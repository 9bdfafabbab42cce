from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import datafusion
import pyarrow.parquet as pq
import pytest

from datafusion_distributed.test_utils import tpch
from datafusion_distributed.test_utils.compare import is_ordered_query
from datafusion_distributed.test_utils.tpch import (
    DATA_DIR_ENV,
    TPCH_QUERY_NUMBERS,
    TPCH_TABLES,
    find_tpchgen_cli,
    register_tpch,
    tpch_data,
    tpch_query,
)

TINY_SF = 0.001


def test_query_numbers_and_tables():
    assert list(TPCH_QUERY_NUMBERS) == list(range(1, 23))
    assert len(TPCH_TABLES) == 8


@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_every_query_is_one_statement(n):
    sql = tpch_query(n)
    assert sql.lstrip().startswith(f"-- TPC-H Q{n}:")
    body = sql.rstrip().removesuffix(";")
    assert ";" not in "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
    assert "select" in body.lower()


def test_query_numbers_out_of_range():
    with pytest.raises(ValueError):
        tpch_query(0)
    with pytest.raises(ValueError):
        tpch_query(23)


def test_most_queries_order_their_rows():
    unordered = [n for n in TPCH_QUERY_NUMBERS if not is_ordered_query(tpch_query(n))]
    assert unordered == [6, 14, 17, 19]  # the single-row aggregates


def test_find_tpchgen_cli():
    path = find_tpchgen_cli()
    assert os.access(path, os.X_OK)


def test_sf001_layout(tpch_sf001):
    assert tpch_sf001.name == "sf0.01-p4"
    for table in TPCH_TABLES:
        files = sorted((tpch_sf001 / table).glob("*.parquet"))
        assert files, table
        assert len(files) == (1 if table in ("nation", "region") else 4), table
    assert pq.read_metadata(tpch_sf001 / "lineitem" / "lineitem.1.parquet").num_rows > 10_000


def test_register_tpch(tpch_sf001):
    ctx = datafusion.SessionContext()
    register_tpch(ctx, tpch_sf001)
    for table in TPCH_TABLES:
        assert ctx.table_exist(table)
    counts = ctx.sql(
        "SELECT (SELECT count(*) FROM nation) AS nations, (SELECT count(*) FROM region) AS regions"
    ).to_pylist()
    assert counts == [{"nations": 25, "regions": 5}]


def test_generated_once_then_reused(tmp_path, monkeypatch):
    path = tpch_data(TINY_SF, parts=2, data_dir=tmp_path)
    assert path == tmp_path / "tpch" / "sf0.001-p2"
    assert len(list((path / "lineitem").glob("*.parquet"))) == 2

    def fail(*args, **kwargs):
        raise AssertionError("data should have been reused")

    monkeypatch.setattr(tpch, "_generate", fail)
    assert tpch_data(TINY_SF, parts=2, data_dir=tmp_path) == path
    assert [p.name for p in (tmp_path / "tpch").iterdir()] == ["sf0.001-p2"]  # no temp folders left


def test_cache_location_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert tpch_data(TINY_SF, parts=1) == tmp_path / "tpch" / "sf0.001-p1"


def test_cache_location_in_a_checkout_and_when_installed(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    checkout = tpch.repo_root()
    assert checkout is not None and (checkout / "pyproject.toml").is_file()
    assert tpch.data_root() == checkout / "data"

    installed = tmp_path / "site-packages" / "datafusion_distributed" / "test_utils" / "tpch.py"
    monkeypatch.setattr(tpch, "__file__", str(installed))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert tpch.repo_root() is None
    assert tpch.data_root() == tmp_path / "cache" / "datafusion-distributed"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tpch.data_root() == tmp_path / "home" / ".cache" / "datafusion-distributed"


def test_incomplete_folder_is_not_used(tmp_path):
    (tmp_path / "tpch" / "sf0.001-p3" / "lineitem").mkdir(parents=True)
    with pytest.raises(RuntimeError, match="not a complete TPC-H data set"):
        tpch_data(TINY_SF, parts=3, data_dir=tmp_path)


def test_failed_generation_leaves_nothing(tmp_path, monkeypatch):
    def fail(out, sf, parts):
        (out / "lineitem").mkdir()
        raise RuntimeError("generator failed")

    monkeypatch.setattr(tpch, "_generate", fail)
    with pytest.raises(RuntimeError, match="generator failed"):
        tpch_data(TINY_SF, parts=2, data_dir=tmp_path)
    assert list((tmp_path / "tpch").iterdir()) == []


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        tpch_data(0, data_dir=tmp_path)
    with pytest.raises(ValueError):
        tpch_data(TINY_SF, parts=0, data_dir=tmp_path)


def test_concurrent_generation_is_safe(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        from datafusion_distributed.test_utils.tpch import tpch_data
        print(tpch_data({TINY_SF}, parts=2, data_dir=sys.argv[1]))
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0]
    expected = tmp_path / "tpch" / "sf0.001-p2"
    assert outputs == [str(expected)] * 3
    assert [p.name for p in (tmp_path / "tpch").iterdir()] == ["sf0.001-p2"]
    assert len(list((expected / "orders").glob("*.parquet"))) == 2
