"""The command line's plan with metrics, and its progress line staying off a pipe."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq


def test_analyze_and_explain_analyze(tmp_path, run_cli):
    for part in range(3):
        pq.write_table(pa.table({"k": [part] * 5, "v": list(range(5))}), tmp_path / f"p{part}.parquet")
    table = f"t={tmp_path}/"
    query = "SELECT k, sum(v) AS s FROM t GROUP BY k ORDER BY k"
    result = run_cli("sql", query, "--table", table, "--analyze")
    assert result.returncode == 0, result.stderr
    assert "│ metrics: " in result.stdout and "metrics=[output_rows=" in result.stdout
    result = run_cli("sql", f"EXPLAIN ANALYZE {query}", "--table", table)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Query ") and "metrics=[output_rows=3" in result.stdout
    result = run_cli("sql", query, "--table", table, "--explain", "--plan-format", "mermaid")
    assert result.stdout.startswith("flowchart BT")
    # standard error is a pipe here: the rows are reported, no progress line is drawn
    result = run_cli("sql", query, "--table", table)
    assert result.returncode == 0 and "stages " not in result.stderr
