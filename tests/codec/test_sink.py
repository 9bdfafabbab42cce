"""File sinks read from and rewritten in real plan bytes of COPY statements."""

from __future__ import annotations

import pytest
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec.sink import file_sink, with_csv_formats, with_table_path


@pytest.fixture(scope="module")
def ctx():
    ctx = SessionContext()
    ctx.sql("CREATE TABLE t AS VALUES (1, 'a'), (2, 'b')").collect()
    return ctx


def sink_bytes(ctx, copy: str) -> bytes:
    return ctx.sql(copy).execution_plan().to_bytes()


@pytest.mark.parametrize("kind", ["parquet", "csv", "json"])
def test_a_copy_to_a_folder_is_read_back(ctx, tmp_path, kind):
    raw = sink_bytes(ctx, f"COPY t TO '{tmp_path}/out/' STORED AS {kind.upper()} PARTITIONED BY (column2)")
    sink = file_sink(raw)
    assert sink is not None
    assert sink.kind == kind
    assert sink.destination == (tmp_path / "out").as_uri() + "/"
    assert sink.partition_columns == ("column2",)
    assert sink.file_extension == kind
    assert sink.writes_folder


@pytest.mark.parametrize(
    ("target", "folder"),
    [("out", True), ("out/", True), ("out.parquet", False), ("a.b/out", True)],
)
def test_a_path_with_an_extension_is_a_single_file(ctx, tmp_path, target, folder):
    sink = file_sink(sink_bytes(ctx, f"COPY t TO '{tmp_path}/{target}' STORED AS PARQUET"))
    assert sink.writes_folder is folder


def test_other_nodes_are_no_sink(ctx):
    assert file_sink(ctx.sql("SELECT * FROM t").execution_plan().to_bytes()) is None
    assert file_sink(b"\xff") is None


def test_a_rewritten_sink_writes_to_the_new_folder(ctx, tmp_path):
    raw = sink_bytes(ctx, f"COPY t TO '{tmp_path}/out/' STORED AS PARQUET")
    moved = with_table_path(raw, (tmp_path / "elsewhere").as_uri() + "/")
    assert file_sink(moved).destination == (tmp_path / "elsewhere").as_uri() + "/"
    plan = ExecutionPlan.from_bytes(ctx, moved)
    for _ in ctx.execute(plan, 0):  # the plan rebuilds and runs
        pass
    written = list((tmp_path / "elsewhere").glob("*.parquet"))
    assert written and not (tmp_path / "out").exists()
    assert ctx.read_parquet(str(tmp_path / "elsewhere")).count() == 2


TEMPORAL = """SELECT * FROM (VALUES (DATE '2020-01-02', TIMESTAMP '2020-01-02 03:04:05',
    TIMESTAMP '2020-01-02 03:04:05.25', arrow_cast('03:04:05.5', 'Time64(Microsecond)'),
    arrow_cast(TIMESTAMP '2020-01-02 03:04:05', 'Date64'))) t(d, ts, tsf, tm, d64)"""


def test_a_csv_sink_that_travels_writes_dates_and_times_as_datafusion_does(ctx, tmp_path):
    """DataFusion 55 decodes a CSV sink's unset formats as empty ones (every date and time
    written empty); with the defaults written in, the travelled sink writes what DataFusion
    writes in memory."""
    ctx.sql(f"COPY ({TEMPORAL}) TO '{tmp_path}/memory/' STORED AS CSV").collect()
    raw = sink_bytes(ctx, f"COPY ({TEMPORAL}) TO '{tmp_path}/travelled/' STORED AS CSV")
    for _ in ctx.execute(ExecutionPlan.from_bytes(ctx, with_csv_formats(raw)), 0):
        pass
    (memory,) = (tmp_path / "memory").iterdir()
    (travelled,) = (tmp_path / "travelled").iterdir()
    assert travelled.read_text() == memory.read_text()
    assert "2020-01-02T03:04:05.250" in memory.read_text()


def test_csv_formats_the_user_set_are_kept(ctx, tmp_path):
    raw = sink_bytes(
        ctx, f"COPY ({TEMPORAL}) TO '{tmp_path}/x/' STORED AS CSV OPTIONS ('format.date_format' '%d/%m/%Y')"
    )
    for _ in ctx.execute(ExecutionPlan.from_bytes(ctx, with_csv_formats(raw)), 0):
        pass
    (written,) = (tmp_path / "x").iterdir()
    assert written.read_text().splitlines()[1].startswith("02/01/2020,2020-01-02T03:04:05,")
