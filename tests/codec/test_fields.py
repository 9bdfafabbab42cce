"""Pin every protobuf field number in codec/fields.py against the installed datafusion wheel.

Two independent checks, so a wheel that moves a field fails here, naming the field, before
it silently corrupts plans elsewhere:

* The wheel's own decoder names the field: prost reports a decode error as the chain of
  `Message.field` it was in ("PartitionedFile.range: FileGroup.files: ..."). Encoding a
  deliberately broken value at a path of field numbers and reading that chain back tells
  which message and field each number is, without a copy of the schema.
* Real plans decode into the structure we expect: serialised parquet, csv, json and arrow
  scans hold their files, sizes and byte ranges where codec/scan.py reads them.
"""

from __future__ import annotations

import json
import os
import re

import datafusion
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec import fields as F
from datafusion_distributed.codec import file_groups, scan_kind
from datafusion_distributed.codec.wire import LEN, encode_len_field, encode_varint_field, iter_fields
from datafusion_distributed.execution_plans.plan_node import PlanNode

ROOT = "PhysicalPlanNode.physical_plan_type"
INVALID_MESSAGE = b"\xff"  # a truncated varint: any message decoding it fails right there


def decode_chain(path: list[int], leaf: bytes = INVALID_MESSAGE) -> list[str]:
    """Wrap `leaf` in length-delimited fields `path` (outermost first), decode it as a
    PhysicalPlanNode and return the wheel's `Message.field` chain, outermost first."""
    buf = leaf
    for number in reversed(path):
        buf = encode_len_field(number, buf)
    with pytest.raises(BaseException) as info:  # prost errors arrive as RuntimeError
        ExecutionPlan.from_bytes(SessionContext(), buf)
    text = str(info.value)
    marker = "failed to decode Protobuf message: "
    if marker not in text:
        return []
    parts = text.split(marker, 1)[1].split(": ")
    return [p for p in reversed(parts) if re.fullmatch(r"\w+\.\w+", p)]


def wrong_wire_type(number: int) -> bytes:
    """Field `number` encoded length-delimited: a decode error when it is a varint field."""
    return encode_len_field(number, b"x")


def invalid_utf8(number: int) -> bytes:
    return encode_len_field(number, b"\xff")


CONF = [F.PARQUET_SCAN, F.SCAN_BASE_CONF]
GROUP = [*CONF, F.CONF_FILE_GROUPS]
FILE = [*GROUP, F.GROUP_FILES]
SINK_CONFIG = [F.PARQUET_SINK, F.SINK_EXEC_SINK, F.SINK_CONFIG]
CSV_OPTIONS = [F.CSV_SINK, F.SINK_EXEC_SINK, F.CSV_SINK_WRITER_OPTIONS]

# (constant, path of field numbers, leaf, the chain the wheel must report, outermost first)
PINS = [
    ("PARQUET_SCAN", [F.PARQUET_SCAN, F.SCAN_BASE_CONF], INVALID_MESSAGE, "ParquetScanExecNode.base_conf"),
    ("CSV_SCAN", [F.CSV_SCAN, F.SCAN_BASE_CONF], INVALID_MESSAGE, "CsvScanExecNode.base_conf"),
    ("AVRO_SCAN", [F.AVRO_SCAN, F.SCAN_BASE_CONF], INVALID_MESSAGE, "AvroScanExecNode.base_conf"),
    ("JSON_SCAN", [F.JSON_SCAN, F.SCAN_BASE_CONF], INVALID_MESSAGE, "JsonScanExecNode.base_conf"),
    ("ARROW_SCAN", [F.ARROW_SCAN, F.SCAN_BASE_CONF], INVALID_MESSAGE, "ArrowScanExecNode.base_conf"),
    ("CONF_FILE_GROUPS", GROUP, INVALID_MESSAGE, "FileScanExecConf.file_groups"),
    ("CONF_STATISTICS", [*CONF, F.CONF_STATISTICS], INVALID_MESSAGE, "FileScanExecConf.statistics"),
    ("GROUP_FILES", FILE, INVALID_MESSAGE, "FileGroup.files"),
    ("FILE_PATH", FILE, invalid_utf8(F.FILE_PATH), "PartitionedFile.path"),
    ("FILE_SIZE", FILE, wrong_wire_type(F.FILE_SIZE), "PartitionedFile.size"),
    ("FILE_RANGE", [*FILE, F.FILE_RANGE], INVALID_MESSAGE, "PartitionedFile.range"),
    ("RANGE_START", [*FILE, F.FILE_RANGE], wrong_wire_type(F.RANGE_START), "FileRange.start"),
    ("RANGE_END", [*FILE, F.FILE_RANGE], wrong_wire_type(F.RANGE_END), "FileRange.end"),
    ("PROJECTION_INPUT", [F.PROJECTION, F.PROJECTION_INPUT], INVALID_MESSAGE, "ProjectionExecNode.input"),
    ("SORT_KEYS", [F.SORT, F.SORT_KEYS], INVALID_MESSAGE, "SortExecNode.expr"),
    ("COOPERATIVE_INPUT", [F.COOPERATIVE, F.COOPERATIVE_INPUT], INVALID_MESSAGE, "CooperativeExecNode.input"),
    ("LOCAL_LIMIT_INPUT", [F.LOCAL_LIMIT, F.LOCAL_LIMIT_INPUT], INVALID_MESSAGE, "LocalLimitExecNode.input"),
    ("HASH_JOIN_LEFT", [F.HASH_JOIN, F.HASH_JOIN_LEFT], INVALID_MESSAGE, "HashJoinExecNode.left"),
    (
        "HASH_JOIN_PARTITION_MODE",
        [F.HASH_JOIN],
        wrong_wire_type(F.HASH_JOIN_PARTITION_MODE),
        "HashJoinExecNode.partition_mode",
    ),
    (
        "COALESCE_PARTITIONS_INPUT",
        [F.COALESCE_PARTITIONS, F.COALESCE_PARTITIONS_INPUT],
        INVALID_MESSAGE,
        "CoalescePartitionsExecNode.input",
    ),
    ("REPARTITION_INPUT", [F.REPARTITION, F.REPARTITION_INPUT], INVALID_MESSAGE, "RepartitionExecNode.input"),
    (
        "PARQUET_PREDICATE",
        [F.PARQUET_SCAN, F.PARQUET_PREDICATE],
        INVALID_MESSAGE,
        "ParquetScanExecNode.predicate",
    ),
    ("FILTER_EXPR", [F.FILTER, F.FILTER_EXPR], INVALID_MESSAGE, "FilterExecNode.expr"),
    (
        "SORT_EXPR_EXPR",
        [F.SORT, F.SORT_KEYS, F.EXPR_SORT, F.SORT_EXPR_EXPR],
        INVALID_MESSAGE,
        "PhysicalSortExprNode.expr",
    ),
    (
        "SORT_PRESERVING_MERGE",
        [F.SORT_PRESERVING_MERGE, F.SORT_KEYS],
        INVALID_MESSAGE,
        "SortPreservingMergeExecNode.expr",
    ),
    ("WINDOW_EXPRS", [F.WINDOW_AGG, F.WINDOW_EXPRS], INVALID_MESSAGE, "WindowAggExecNode.window_expr"),
    (
        "WINDOW_PARTITION_BY",
        [F.WINDOW_AGG, F.WINDOW_EXPRS, F.WINDOW_PARTITION_BY],
        INVALID_MESSAGE,
        "PhysicalWindowExprNode.partition_by",
    ),
    (
        "GENERATE_SERIES_SCHEMA",
        [F.GENERATE_SERIES, F.GENERATE_SERIES_SCHEMA],
        INVALID_MESSAGE,
        "GenerateSeriesNode.schema",
    ),
    (
        "GENERATE_SERIES_INT64_ARGS",
        [F.GENERATE_SERIES, F.GENERATE_SERIES_INT64_ARGS],
        wrong_wire_type(1),
        "GenerateSeriesArgsInt64.start",
    ),
    (
        "GENERATE_SERIES_TIMESTAMP_ARGS",
        [F.GENERATE_SERIES, F.GENERATE_SERIES_TIMESTAMP_ARGS],
        invalid_utf8(F.TIMESTAMP_ARGS_TZ),
        "GenerateSeriesArgsTimestamp.tz",
    ),
    ("MEMORY_SCAN", [F.MEMORY_SCAN, 2], INVALID_MESSAGE, "MemoryScanExecNode.schema"),
    (
        "MEMORY_PARTITIONS",
        [F.MEMORY_SCAN],
        encode_varint_field(F.MEMORY_PARTITIONS, 1),
        "MemoryScanExecNode.partitions",
    ),
    (
        "MEMORY_SORT_INFORMATION",
        [F.MEMORY_SCAN, F.MEMORY_SORT_INFORMATION],
        INVALID_MESSAGE,
        "MemoryScanExecNode.sort_information",
    ),
    ("MEMORY_FETCH", [F.MEMORY_SCAN], wrong_wire_type(F.MEMORY_FETCH), "MemoryScanExecNode.fetch"),
    ("JSON_SINK", [F.JSON_SINK, F.SINK_EXEC_SINK], INVALID_MESSAGE, "JsonSinkExecNode.sink"),
    ("CSV_SINK", [F.CSV_SINK, F.SINK_EXEC_SINK], INVALID_MESSAGE, "CsvSinkExecNode.sink"),
    ("PARQUET_SINK", [F.PARQUET_SINK, F.SINK_EXEC_SINK], INVALID_MESSAGE, "ParquetSinkExecNode.sink"),
    ("SINK_CONFIG", [*SINK_CONFIG], INVALID_MESSAGE, "ParquetSink.config"),
    (
        "SINK_OBJECT_STORE_URL",
        SINK_CONFIG,
        invalid_utf8(F.SINK_OBJECT_STORE_URL),
        "FileSinkConfig.object_store_url",
    ),
    ("SINK_TABLE_PATHS", SINK_CONFIG, invalid_utf8(F.SINK_TABLE_PATHS), "FileSinkConfig.table_paths"),
    (
        "SINK_PARTITION_COLS",
        [*SINK_CONFIG, F.SINK_PARTITION_COLS],
        INVALID_MESSAGE,
        "FileSinkConfig.table_partition_cols",
    ),
    (
        "SINK_FILE_EXTENSION",
        SINK_CONFIG,
        invalid_utf8(F.SINK_FILE_EXTENSION),
        "FileSinkConfig.file_extension",
    ),
    (
        "SINK_FILE_OUTPUT_MODE",
        SINK_CONFIG,
        wrong_wire_type(F.SINK_FILE_OUTPUT_MODE),
        "FileSinkConfig.file_output_mode",
    ),
    (
        "PARTITION_COLUMN_NAME",
        [*SINK_CONFIG, F.SINK_PARTITION_COLS],
        invalid_utf8(F.PARTITION_COLUMN_NAME),
        "PartitionColumn.name",
    ),
    ("CSV_SINK_WRITER_OPTIONS", CSV_OPTIONS, INVALID_MESSAGE, "CsvSink.writer_options"),
    ("CSV_DATE_FORMAT", CSV_OPTIONS, invalid_utf8(F.CSV_DATE_FORMAT), "CsvWriterOptions.date_format"),
    (
        "CSV_DATETIME_FORMAT",
        CSV_OPTIONS,
        invalid_utf8(F.CSV_DATETIME_FORMAT),
        "CsvWriterOptions.datetime_format",
    ),
    (
        "CSV_TIMESTAMP_FORMAT",
        CSV_OPTIONS,
        invalid_utf8(F.CSV_TIMESTAMP_FORMAT),
        "CsvWriterOptions.timestamp_format",
    ),
    ("CSV_TIME_FORMAT", CSV_OPTIONS, invalid_utf8(F.CSV_TIME_FORMAT), "CsvWriterOptions.time_format"),
    (
        "GENERATE_SERIES_DATE_ARGS",
        [F.GENERATE_SERIES, F.GENERATE_SERIES_DATE_ARGS],
        wrong_wire_type(1),
        "GenerateSeriesArgsDate.start",
    ),
]


@pytest.mark.parametrize(("name", "path", "leaf", "expected"), PINS, ids=[p[0] for p in PINS])
def test_field_number_is_what_the_wheel_decodes(name, path, leaf, expected):
    chain = decode_chain(path, leaf)
    assert chain and chain[0] == ROOT, f"unexpected decode error for {name}: {chain}"
    assert chain[-1] == expected, (
        f"codec/fields.py {name} = {getattr(F, name)} no longer is {expected} in datafusion "
        f"{datafusion.__version__}: the wheel decodes field path {path} as {' > '.join(chain)}"
    )


def test_scan_kinds_cover_exactly_the_scan_constants():
    assert F.SCAN_KINDS == {
        F.PARQUET_SCAN: "parquet",
        F.CSV_SCAN: "csv",
        F.AVRO_SCAN: "avro",
        F.JSON_SCAN: "json",
        F.ARROW_SCAN: "arrow",
    }
    assert len(set(F.SCAN_KINDS)) == 5


def test_input_marker_is_not_a_plan_node():
    """A plan still holding a stage-input marker must fail to deserialise, never run."""
    with pytest.raises(Exception, match="Unsupported physical plan"):
        ExecutionPlan.from_bytes(SessionContext(), encode_len_field(F.INPUT_MARKER, b"input 1"))


def test_local_limit_is_not_a_scan():
    """LocalLimitExec's oneof number (7) once stood for avro scans here, which hid every
    node below a LocalLimitExec from the planner."""
    assert decode_chain([7, 1])[-1] == "LocalLimitExecNode.input"
    assert 7 not in F.SCAN_KINDS


# --------------------------------------------------------------------------------------
# Real serialised scans decode into the expected structure
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scan_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scans")
    table = pa.table({"a": list(range(2000)), "b": [f"value-{i}" for i in range(2000)]})
    paths = {}
    for i in range(2):
        part = table.slice(i * 1000, 1000)
        (folder / "parquet").mkdir(exist_ok=True)
        pq.write_table(part, folder / "parquet" / f"p{i}.parquet")
        (folder / "csv").mkdir(exist_ok=True)
        pcsv.write_csv(part, folder / "csv" / f"p{i}.csv")
        (folder / "json").mkdir(exist_ok=True)
        with open(folder / "json" / f"p{i}.json", "w") as out:
            out.writelines(json.dumps(row) + "\n" for row in part.to_pylist())
        (folder / "arrow").mkdir(exist_ok=True)
        with pa.ipc.new_file(str(folder / "arrow" / f"p{i}.arrow"), part.schema) as writer:
            writer.write_table(part)
    for kind in ("parquet", "csv", "json", "arrow"):
        paths[kind] = folder / kind
    return paths


def register(ctx: SessionContext, kind: str, name: str, path) -> None:
    {
        "parquet": ctx.register_parquet,
        "csv": ctx.register_csv,
        "json": ctx.register_json,
        "arrow": ctx.register_arrow,
    }[kind](name, str(path))


def display_groups(line: str) -> list[list[tuple[str, tuple[int, int] | None]]]:
    """The file groups DataFusion displays: `file_groups={2 groups: [[a:0..10, b], [c]]}`."""
    inner = re.search(r"file_groups=\{\d+ groups?: \[(.*)\]\}", line).group(1)
    groups = []
    for group in re.findall(r"\[([^\[\]]*)\]", inner):
        files = []
        for item in group.split(", "):
            match = re.fullmatch(r"(.*):(\d+)\.\.(\d+)", item)
            files.append(
                (match.group(1), (int(match.group(2)), int(match.group(3)))) if match else (item, None)
            )
        groups.append(files)
    return groups


@pytest.mark.parametrize("kind", ["parquet", "csv", "json", "arrow"])
def test_real_scan_decodes_files_sizes_and_oneof(kind, scan_files):
    ctx = SessionContext(SessionConfig().with_target_partitions(2))
    register(ctx, kind, "t", scan_files[kind])
    plan = ctx.table("t").execution_plan()
    raw = plan.to_bytes()
    top = list(iter_fields(raw))
    by_kind = {name: number for number, name in F.SCAN_KINDS.items()}
    assert [(f.number, f.wire_type) for f in top] == [(by_kind[kind], LEN)], (
        f"a file_type={kind} scan serialises as oneof field {[f.number for f in top]}, "
        f"codec/fields.py says {by_kind[kind]}"
    )
    assert scan_kind(raw) == kind
    decoded = file_groups(raw)
    shown = display_groups(plan.display())
    assert [[f.path for f in g] for g in decoded] == [[p for p, _ in g] for g in shown]
    assert [[f.range for f in g] for g in decoded] == [[r for _, r in g] for g in shown]
    for group in decoded:
        for file in group:
            assert file.size == os.path.getsize("/" + file.path), f"FILE_SIZE of {file.path}"


def test_split_parquet_file_ranges_decode(tmp_path):
    """One parquet file read by several partitions: each holds a byte range of it."""
    table = pa.table({"a": list(range(200_000))})
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=10_000)
    config = (
        SessionConfig().with_target_partitions(4).set("datafusion.optimizer.repartition_file_min_size", "1")
    )
    ctx = SessionContext(config)
    ctx.register_parquet("t", str(tmp_path / "big.parquet"))
    plan = ctx.table("t").execution_plan()
    decoded = file_groups(plan.to_bytes())
    assert len(decoded) > 1
    ranges = [f.range for g in decoded for f in g]
    assert all(r is not None for r in ranges)
    assert [[(f.path, f.range) for f in g] for g in decoded] == display_groups(plan.display())
    size = os.path.getsize(tmp_path / "big.parquet")
    assert ranges[0][0] == 0 and ranges[-1][1] == size


def test_no_other_node_is_taken_for_a_scan(scan_files):
    """Plans with many node kinds: only DataSourceExec nodes are file scans."""
    ctx = SessionContext(SessionConfig().with_target_partitions(3))
    register(ctx, "parquet", "t", scan_files["parquet"])
    register(ctx, "csv", "u", scan_files["csv"])
    queries = [
        "SELECT a FROM t UNION SELECT a FROM u LIMIT 3",  # LocalLimitExec
        "SELECT * FROM (SELECT a FROM t LIMIT 5) UNION ALL (SELECT a FROM u LIMIT 4)",
        "SELECT t.b, count(*) FROM t JOIN u USING (a) GROUP BY t.b ORDER BY 2 DESC LIMIT 3 OFFSET 1",
        "SELECT a, row_number() OVER (PARTITION BY a % 3 ORDER BY a) FROM t",
        "SELECT * FROM t WHERE a NOT IN (SELECT a FROM u WHERE a > 10)",
        "SELECT * FROM t CROSS JOIN (SELECT 1 AS one) o",
    ]
    for sql in queries:
        root = PlanNode.from_plan(ctx.sql(sql).execution_plan())
        for node in root.walk():
            kind = scan_kind(node.raw)
            if node.name == "DataSourceExec":
                assert kind in ("parquet", "csv"), node.line
            else:
                assert kind is None, f"{node.line} taken for a {kind} scan in {sql}"
