"""The `sql` command prints results as datafusion-cli does: `--format`, `--maxrows`, and
`--version`; the plan format of `--explain` is `--plan-format`."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from datafusion_distributed.cli.formats import format_result, parse_maxrows

QUERY = "SELECT x, CAST(x AS VARCHAR) || ',' AS s, NULL AS n FROM generate_series(1, 3) t(x) ORDER BY x"


@pytest.mark.parametrize(
    ("fmt", "printed"),
    [
        ("csv", 'x,s,n\n1,"1,",\n2,"2,",\n3,"3,",'),
        ("tsv", "x\ts\tn\n1\t1,\t\n2\t2,\t\n3\t3,\t"),
        (
            "nd-json",
            '{"x": 1, "s": "1,", "n": null}\n{"x": 2, "s": "2,", "n": null}\n{"x": 3, "s": "3,", "n": null}',
        ),
    ],
)
def test_each_format(run_cli, fmt, printed):
    result = run_cli("sql", "--format", fmt, QUERY)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip("\n") == printed


def test_json_is_an_array_of_objects_with_values_as_text_where_json_has_no_type():
    table = pa.table({"d": pa.array([pa.scalar(1, pa.date32()).as_py()]), "l": [[1, 2]], "b": [None]})
    assert json.loads(format_result(table, "json")) == [{"d": "1970-01-02", "l": [1, 2], "b": None}]


def test_a_table_shows_maxrows_rows_and_says_how_many_it_left_out(run_cli):
    result = run_cli("sql", "--maxrows", "2", QUERY)
    assert result.stdout.splitlines()[-1] == "2 of 3 rows shown (--maxrows inf for all)"
    assert "| 3 " not in result.stdout
    assert "| 3 " in run_cli("sql", "--maxrows", "inf", QUERY).stdout
    table = pa.table({"x": list(range(50))})
    assert format_result(table, "automatic").splitlines()[-1] == "40 of 50 rows shown (--maxrows inf for all)"


def test_bad_maxrows_is_refused():
    with pytest.raises(Exception, match="takes a number of rows or inf"):
        parse_maxrows("lots")


def test_version_names_the_library_and_datafusion(run_cli):
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("datafusion-distributed ") and "(DataFusion 55." in result.stdout


def test_the_plan_format_has_its_own_flag(run_cli):
    result = run_cli("sql", "--explain", "--plan-format", "mermaid", QUERY)
    assert result.returncode == 0, result.stderr
    assert result.stdout.lstrip().startswith(("flowchart", "%%", "graph"))
