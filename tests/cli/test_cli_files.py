"""The `sql` command over files and standard input: every statement in order, in one cluster, so
tables and views made by one are there for the next; the first failure stops the run and is
named by file, statement number and line. Answers are single-node DataFusion's."""

from __future__ import annotations

import re

import pytest
from datafusion import SessionContext

from datafusion_distributed.api.dataframe import format_table

SUMS = "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k ORDER BY k"
JOINED = "SELECT d.name, sum(t.v) AS s FROM t JOIN d ON t.k = d.k GROUP BY d.name ORDER BY d.name"


@pytest.fixture
def data(tmp_path, table_dir):
    """The parquet folder `t` (3 files) and a CSV file `d` naming its keys."""
    (tmp_path / "d.csv").write_text("k,name\n0,zero\n1,one\n2,two\n3,three\n")
    return tmp_path


def expected(data, *queries: str) -> list[str]:
    """Single-node DataFusion's answers, as the command prints them."""
    ctx = SessionContext()
    ctx.register_parquet("t", str(data / "t"))
    ctx.register_csv("d", str(data / "d.csv"))
    return [format_table(ctx.sql(q).to_arrow_table()) for q in queries]


def script(data) -> str:
    return f"""-- tables made by one statement are there for the next
CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{data / "t"}/';
CREATE EXTERNAL TABLE d STORED AS CSV LOCATION '{data / "d.csv"}' OPTIONS ('format.has_header' 'true');
{SUMS};
CREATE VIEW big AS SELECT * FROM t WHERE v > 100;  -- a view; too
{JOINED}
"""


def test_a_file_runs_every_statement_in_order(data, run_cli):
    (data / "report.sql").write_text(script(data))
    result = run_cli("sql", "-f", str(data / "report.sql"), "SELECT count(*) AS big FROM big")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "\n".join([*expected(data, SUMS, JOINED), "+-----+", "| big |", "+-----+",
                                       "| 299 |", "+-----+", ""])  # fmt: skip
    counts = [line.split(" row(s)")[0] for line in result.stderr.splitlines() if " row(s)" in line]
    assert counts == ["0", "0", "4", "0", "4", "1"]


def test_several_files_share_one_session(data, run_cli):
    first, second = data / "setup.sql", data / "query.sql"
    first.write_text(f"CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{data / 't'}/'")  # no `;`
    second.write_text(f"{SUMS};\n")
    result = run_cli("sql", "--file", str(first), "-f", str(second))
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected(data, SUMS)[0] + "\n"


def test_an_error_names_the_file_and_the_statement_and_stops_the_run(data, run_cli):
    path = data / "broken.sql"
    path.write_text("SELECT 1 AS one;\n\n-- the next one is wrong\nSELEC 2;\nSELECT 3 AS three;\n")
    result = run_cli("sql", "-f", str(path))
    assert result.returncode == 1
    assert f"error: {path}, statement 2 (line 4): " in result.stderr and "SELEC" in result.stderr
    assert "| one |" in result.stdout and "three" not in result.stdout
    assert "Traceback" not in result.stderr


def test_a_missing_file_is_named(tmp_path, run_cli):
    result = run_cli("sql", "-f", str(tmp_path / "nope.sql"))
    assert result.returncode == 1 and f"--file '{tmp_path / 'nope.sql'}': no such file" in result.stderr


def test_statements_are_read_from_standard_input(data, run_cli):
    result = run_cli("sql", stdin=script(data))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "\n".join(expected(data, SUMS, JOINED)) + "\n"
    result = run_cli("sql", stdin="SELECT 1 AS one;\nSELECT nope;\n")
    assert result.returncode == 1 and "error: standard input, statement 2 (line 2): " in result.stderr


def test_the_query_argument_may_hold_several_statements(data, run_cli):
    result = run_cli("sql", f"{SUMS}; SELECT 7 AS seven", "--table", f"t={data / 't'}/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(expected(data, SUMS)[0]) and "| 7     |" in result.stdout


def test_setting_flags_shape_the_plan(data, run_cli):
    def stages(*flags: str) -> list[str]:
        result = run_cli("sql", SUMS, "--table", f"t={data / 't'}/", "--explain", *flags)
        assert result.returncode == 0, result.stderr
        return re.findall(r"tasks=\d+ partitions=\d+", result.stdout)

    # 1-byte partitions: the scan splits over both workers, in 2 workers x partitions_per_task
    assert stages("--bytes-per-partition", "1")[-1] == "tasks=2 partitions=4"
    assert stages("--bytes-per-partition", "1", "--partitions-per-task", "3")[-1] == "tasks=2 partitions=6"
    assert stages("--bytes-per-partition", "1", "--max-tasks-per-stage", "1") == ["tasks=1 partitions=1"]


def test_files_are_queried_by_path_and_split_across_tasks(data, run_cli):
    """Once "table not found", even for an existing file; datafusion-cli and DuckDB take a
    path as a table."""
    by_path = SUMS.replace("FROM t", f"FROM '{data / 't'}/'")
    result = run_cli("sql", "--bytes-per-partition", "1", by_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected(data, SUMS)[0].strip()
    plan = run_cli("sql", "--bytes-per-partition", "1", "--explain", by_path)
    assert re.search(r"Stage \d+ ── tasks=[2-9]", plan.stdout), plan.stdout
    missing = run_cli("sql", f"SELECT * FROM '{data / 'nope.parquet'}'")
    assert missing.returncode != 0 and "nope.parquet' not found" in missing.stderr
