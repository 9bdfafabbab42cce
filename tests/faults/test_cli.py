"""The command line: one-off queries over files, and clear errors for bad arguments."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq


def test_sql_over_a_parquet_folder(tmp_path, run_cli):
    for part in range(3):
        pq.write_table(pa.table({"k": [part] * 5, "v": list(range(5))}), tmp_path / f"p{part}.parquet")
    result = run_cli("sql", "SELECT k, sum(v) AS s FROM t GROUP BY k ORDER BY k", "--table", f"t={tmp_path}/")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert lines == ["| k | s  |", "| 0 | 10 |", "| 1 | 10 |", "| 2 | 10 |"]


def test_unknown_table_format_is_refused(tmp_path, run_cli):
    (tmp_path / "t.xlsx").write_text("x")
    result = run_cli("sql", "SELECT 1", "--table", f"t={tmp_path}/t.xlsx")
    assert result.returncode != 0
    assert "unknown table format '.xlsx'" in result.stderr


def test_bad_sql_is_reported_without_traceback(run_cli):
    result = run_cli("sql", "SELEC 1")
    assert result.returncode == 1
    assert result.stderr.startswith("error:") and "Traceback" not in result.stderr
