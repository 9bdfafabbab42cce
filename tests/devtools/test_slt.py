"""The sqllogictest runner: parser, classifier, expected-text check, and runs on inline files."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from devtools.slt import cli as slt
from devtools.slt.compare import (
    Category,
    classify,
    compare_tables,
    is_explain,
    nondeterminism_reason,
    readable,
)
from devtools.slt.engines import SERIALISE, Outcome, PlainEngine, guarded
from devtools.slt.expected import expected_mismatch, render_rows
from devtools.slt.parser import RecordKind, load_slt, parse_slt
from devtools.slt.runner import RunOptions, Workspace, run_files, run_records


def slt_text(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def ok(table: pa.Table) -> Outcome:
    return Outcome(table, None, 0.0)


def failed(message: str, stage: str = "execute") -> Outcome:
    return Outcome(None, message, 0.0, stage)


# -- parser -----------------------------------------------------------------------------------

PARSED = slt_text(
    """
    # a comment
    statement ok
    CREATE TABLE t AS VALUES (1, 'a'), (2, 'b')

    statement error DataFusion error: .* not found
    SELECT * FROM missing

    statement count 2
    INSERT INTO t VALUES (3, 'c'), (4, 'd')

    query IT rowsort my_label
    SELECT column1,
           column2 FROM t
    ----
    1 a
    2 b

    query error Division by zero
    SELECT 1 / 0

    query error
    SELECT broken
    ----
    DataFusion error: first line
    second line

    onlyif postgres
    query I
    SELECT 1
    ----
    1

    skipif datafusion
    statement ok
    SELECT 2

    onlyif DataFusion
    statement ok
    SELECT 3

    control sortmode rowsort

    hash-threshold 8

    sleep 1s

    statement ok

    SELECT 'sql after a blank line'

    halt
    """
)


def test_parser_reads_every_kind_of_record_with_its_line():
    records = parse_slt(PARSED, "inline.slt")
    kinds = [(r.kind, r.line) for r in records]
    assert kinds == [
        (RecordKind.STATEMENT, 2),
        (RecordKind.STATEMENT, 5),
        (RecordKind.STATEMENT, 8),
        (RecordKind.QUERY, 11),
        (RecordKind.QUERY, 18),
        (RecordKind.QUERY, 21),
        (RecordKind.QUERY, 28),
        (RecordKind.STATEMENT, 34),
        (RecordKind.STATEMENT, 38),
        (RecordKind.CONTROL, 41),
        (RecordKind.CONTROL, 43),
        (RecordKind.CONTROL, 45),
        (RecordKind.STATEMENT, 47),
        (RecordKind.HALT, 51),
    ]
    create, error, count, query, query_error, multi_error, only_pg, skip_df, only_df = records[:9]
    assert all(r.file == "inline.slt" for r in records)
    assert create.sql == "CREATE TABLE t AS VALUES (1, 'a'), (2, 'b')" and not create.expect_error
    assert error.expect_error and error.error_message == "DataFusion error: .* not found"
    assert count.count == 2
    assert query.types == "IT" and query.sort_mode == "rowsort" and query.label == "my_label"
    assert query.sql == "SELECT column1,\n       column2 FROM t"
    assert query.expected == ("1 a", "2 b")
    assert query_error.expect_error and query_error.error_message == "Division by zero"
    assert multi_error.sql == "SELECT broken"
    assert multi_error.error_message == "DataFusion error: first line\nsecond line"
    assert only_pg.skip_reason() == "onlyif postgres"
    assert skip_df.skip_reason() == "skipif datafusion"
    assert only_df.skip_reason() is None
    assert records[9].argument == "sortmode rowsort"
    assert records[12].sql.strip() == "SELECT 'sql after a blank line'"


def test_load_expands_includes_relative_to_the_including_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "part.slt.part").write_text("statement ok\nCREATE TABLE p AS VALUES (1)\n")
    (tmp_path / "sub" / "main.slt").write_text(
        "include ./part.slt.part\n\nquery I\nSELECT * FROM p\n----\n1\n\ninclude ./missing_*.slt.part\n"
    )
    records = load_slt(tmp_path / "sub" / "main.slt", tmp_path)
    assert [(r.kind, r.file, r.line) for r in records] == [
        (RecordKind.STATEMENT, "sub/part.slt.part", 1),
        (RecordKind.QUERY, "sub/main.slt", 3),
        (RecordKind.INCLUDE, "sub/main.slt", 8),
    ]


# -- comparison and classification ------------------------------------------------------------


@pytest.mark.not_a_distributed_run  # the corpus runner's own tests; `make slt` reports what ran distributed
def test_compare_tables_ignores_order_unless_the_query_orders():
    a = pa.table({"x": [1, 2, 3]})
    b = pa.table({"x": [3, 1, 2]})
    assert compare_tables(a, b, "SELECT x FROM t", None) is None
    assert compare_tables(a, b, "SELECT x FROM t ORDER BY x", None) is not None
    assert compare_tables(a, b, "SELECT x FROM t ORDER BY x", "rowsort") is None


@pytest.mark.not_a_distributed_run  # the corpus runner's own tests; `make slt` reports what ran distributed
def test_compare_tables_compares_values_by_position_and_reports_names():
    a = pa.table({"x": [1, 2]})
    assert compare_tables(a, pa.table({"y": [1, 2]}), "SELECT x", None).startswith("column names differ")
    assert "differ" in compare_tables(a, pa.table({"y": [1, 5]}), "SELECT x", None)
    assert compare_tables(a, pa.table({"x": [1.0000000001, 2.0]}), "SELECT x", None) is None


def test_limit_without_order_by_may_pick_other_rows_but_not_another_count():
    a, b = pa.table({"x": [1, 2]}), pa.table({"x": [3, 4]})
    assert nondeterminism_reason("SELECT x FROM t LIMIT 2", a, b) is not None
    assert nondeterminism_reason("SELECT x FROM t LIMIT 2", a, pa.table({"x": [1]})) is None
    assert nondeterminism_reason("SELECT x FROM t", a, b) is None


def test_order_by_limit_differences_allowed_only_within_tied_keys():
    a = pa.table({"k": [1, 1], "v": ["a", "b"]})
    tied = pa.table({"k": [1, 1], "v": ["a", "c"]})
    other_keys = pa.table({"k": [1, 2], "v": ["a", "b"]})
    sql = "SELECT k, v FROM t ORDER BY k LIMIT 2"
    assert nondeterminism_reason(sql, a, tied) is not None
    assert nondeterminism_reason(sql, a, other_keys) is None
    assert nondeterminism_reason("SELECT k, random() FROM t", a, other_keys) is not None


@pytest.mark.not_a_distributed_run  # the corpus runner's own tests; `make slt` reports what ran distributed
def test_classify_every_combination_of_outcomes():
    t = pa.table({"x": [1]})
    sql = "SELECT x FROM t"
    assert classify(sql, None, ok(t), ok(t)).category is Category.EQUAL
    assert classify(sql, None, ok(t), ok(pa.table({"x": [2]}))).category is Category.DISTRIBUTED_WRONG
    assert classify(sql, None, failed("boom"), ok(t)).category is Category.DISTRIBUTED_WRONG
    only = classify(sql, None, ok(t), failed("lost\nmore"))
    assert only.category is Category.DISTRIBUTED_ONLY_ERROR and only.detail == "lost"
    same = classify(sql, None, failed("Error: x\nplan"), failed("stage 1: Error: x"))
    assert same.category is Category.BOTH_ERROR and same.same_first_line
    assert classify(sql, None, failed("a"), failed("b")).same_first_line is False
    assert classify("EXPLAIN " + sql, None, ok(t), ok(pa.table({"x": [2]}))).category is Category.EXPLAIN
    assert classify(sql, None, ok(t), failed("no codec", SERIALISE)).category is Category.NOT_SERIALISABLE
    assert is_explain("  explain analyze SELECT 1") and not is_explain("SELECT 'EXPLAIN'")


def test_readable_replaces_columns_python_cannot_convert():
    table = pa.table({"d": pa.array([2**31 - 1], pa.date32()), "x": [1]})
    with pytest.raises(OverflowError):
        table.to_pylist()
    converted = readable(table)
    assert converted.column("x").to_pylist() == [1]
    assert isinstance(converted.column("d").to_pylist()[0], str)


def test_guarded_turns_errors_and_hangs_into_outcomes():
    assert guarded(lambda: pa.table({"x": [1]}), 5).ok

    def fail():
        raise ValueError("bad")

    assert guarded(fail, 5).error == "bad"
    event = __import__("threading").Event()
    hung = guarded(lambda: event.wait(10), 0.2)
    event.set()
    assert hung.hung and not hung.ok


# -- expected text ----------------------------------------------------------------------------


def test_expected_text_check():
    records = parse_slt(
        slt_text(
            """
            query ITRB rowsort
            SELECT 1
            ----
            2 (empty) 0.333333333333 NULL
            1 a 1.5 true

            query error Division by zero
            SELECT 1 / 0

            statement count 3
            INSERT INTO t VALUES (1)
            """
        )
    )
    table = pa.table(
        {"i": [1, 2], "t": ["a", ""], "r": [1.5, 1 / 3], "b": pa.array([True, None], pa.bool_())}
    )
    assert render_rows(table) == ["1 a 1.5 true", "2 (empty) 0.333333333333 NULL"]
    query, error, count = records
    assert expected_mismatch(query, ok(table)) is None
    assert expected_mismatch(query, ok(table.slice(0, 1))) is not None
    assert expected_mismatch(error, failed("Arrow error: Divide by zero error")) is not None
    assert expected_mismatch(error, failed("DataFusion error: Division by zero")) is None
    assert expected_mismatch(error, ok(table)) is not None
    assert expected_mismatch(count, ok(pa.table({"count": pa.array([3], pa.uint64())}))) is None
    assert expected_mismatch(count, ok(pa.table({"count": pa.array([1], pa.uint64())}))) is not None


# -- running files ----------------------------------------------------------------------------


class WrongEngine(PlainEngine):
    """DataFusion that loses a row of any result of a query mentioning `broken`, and fails
    every INSERT (then `resync` applies it the reference way)."""

    name = "wrong"

    def __init__(self) -> None:
        super().__init__()
        self.resynced: list[str] = []

    def run(self, sql: str, timeout: float) -> Outcome:
        if sql.startswith("INSERT"):
            return failed("the engine lost the insert")
        outcome = super().run(sql, timeout)
        if outcome.ok and "broken" in sql:
            return ok(outcome.table.slice(1))
        return outcome

    def resync(self, sql: str, timeout: float) -> None:
        self.resynced.append(sql)
        super().run(sql, timeout)


DISAGREEING = slt_text(
    """
    statement ok
    CREATE TABLE t AS VALUES (1), (2), (3)

    query I rowsort
    SELECT column1 FROM t

    query I
    SELECT column1 AS broken FROM t ORDER BY 1

    statement ok
    INSERT INTO t VALUES (4)

    query I
    SELECT count(*) FROM t

    onlyif mysql
    query I
    SELECT 1

    statement error
    SELECT * FROM nowhere
    """
)


@pytest.mark.not_a_distributed_run  # the corpus runner's own tests; `make slt` reports what ran distributed
def test_run_records_reports_the_record_a_wrong_engine_gets_wrong(tmp_path):
    records = parse_slt(DISAGREEING, "inline.slt")
    workspace = Workspace(tmp_path)
    candidate = WrongEngine()
    try:
        with workspace.entered():
            results, aborted = run_records(records, PlainEngine(), candidate, workspace, 30)
    finally:
        workspace.close()
    assert aborted is None
    assert [(r.line, r.category) for r in results] == [
        (1, Category.EQUAL),
        (4, Category.EQUAL),
        (7, Category.DISTRIBUTED_WRONG),
        (10, Category.DISTRIBUTED_ONLY_ERROR),
        (13, Category.EQUAL),  # the failed INSERT was resynced: both count 4 rows
        (17, Category.SKIPPED),  # the record starts at its query line
        (20, Category.BOTH_ERROR),
    ]
    assert "row count differs" in results[2].detail
    assert results[3].resynced and candidate.resynced == ["INSERT INTO t VALUES (4)"]


def _corpus(tmp_path: Path, files: dict[str, str]) -> Path:
    corpus = tmp_path / "corpus"
    (corpus / "data" / "testing").mkdir(parents=True)
    (corpus / "data" / "testing" / "numbers.csv").write_text("n,g\n1,a\n2,b\n3,a\n4,b\n")
    for name, text in files.items():
        (corpus / name).write_text(slt_text(text))
    return corpus


SCRATCH_FILE = """
    statement ok
    CREATE EXTERNAL TABLE numbers STORED AS CSV LOCATION '../../testing/numbers.csv'
    OPTIONS ('format.has_header' 'true')

    query TI
    SELECT g, sum(n) FROM numbers GROUP BY g ORDER BY g
    ----
    a 4
    b 6

    query I
    COPY (SELECT * FROM numbers) TO 'test_files/scratch/copied/' STORED AS PARQUET
    ----
    4

    statement ok
    CREATE EXTERNAL TABLE copied STORED AS PARQUET LOCATION 'test_files/scratch/copied/'

    query IT
    SELECT n, g FROM copied ORDER BY n
    ----
    1 a
    2 b
    3 a
    4 b

    query error DataFusion error: .* not found
    SELECT * FROM nowhere
    """


@pytest.mark.not_a_distributed_run  # the corpus runner's own tests; `make slt` reports what ran distributed
@pytest.mark.parametrize("mode", ["distributed", "roundtrip"])
def test_run_files_distributed_and_roundtrip_agree_on_a_small_file(tmp_path, mode):
    corpus = _corpus(tmp_path, {"small.slt": SCRATCH_FILE})
    before = os.getcwd()
    (result,) = run_files([corpus / "small.slt"], RunOptions(mode=mode, forced=True, timeout=30), corpus)
    assert os.getcwd() == before
    assert result.error is None and result.aborted is None
    counts = result.counts
    assert counts["equal"] == 5 and counts["both_error"] == 1, [
        r for r in result.records if r.category != "equal"
    ]
    assert counts["expected_mismatch"] == 0, [r.expected_mismatch for r in result.records]
    assert result.failures == []
    assert not list(corpus.rglob("copied"))  # nothing written into the corpus


@pytest.mark.not_a_distributed_run  # the corpus runner's own tests; `make slt` reports what ran distributed
def test_cli_writes_a_report_and_fails_on_a_file_it_cannot_run(tmp_path, capsys):
    corpus = _corpus(tmp_path, {"small.slt": "query I\nSELECT 1\n----\n1\n"})
    (corpus / "bad.slt").write_bytes(b"\xff\xfe not utf-8")
    report = tmp_path / "out" / "report.json"
    code = slt.main([str(corpus), "--corpus", str(corpus), "--report", str(report), "--quiet"])
    assert code == 1  # bad.slt could not be read
    data = json.loads(report.read_text())
    assert data["totals"]["equal"] == 1 and data["totals"]["file_errors"] == 1
    assert [f["file"] for f in data["files"]] == ["bad.slt", "small.slt"]
    assert "TOTAL" in capsys.readouterr().out
