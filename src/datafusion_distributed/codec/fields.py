"""Protobuf field numbers of DataFusion 55's physical plan messages that we read or write.

Checked against `datafusion/proto/proto/datafusion.proto` at 55.2.0 (the version the
`datafusion` wheel embeds) and pinned by tests/codec/test_fields.py, which fails loudly if a
new wheel moves any of them.
"""

# PhysicalPlanNode's oneof: the file scan variants.
PARQUET_SCAN = 1
CSV_SCAN = 2
AVRO_SCAN = 17
JSON_SCAN = 31
ARROW_SCAN = 38
SCAN_KINDS = {
    PARQUET_SCAN: "parquet",
    CSV_SCAN: "csv",
    AVRO_SCAN: "avro",
    JSON_SCAN: "json",
    ARROW_SCAN: "arrow",
}

# Every *ScanExecNode: its FileScanExecConf.
SCAN_BASE_CONF = 1
# ParquetScanExecNode: the predicate it prunes row groups (and, if asked, rows) with.
PARQUET_PREDICATE = 3

# FileScanExecConf.
CONF_FILE_GROUPS = 1
CONF_STATISTICS = 6
CONF_OBJECT_STORE_URL = 8
CONF_PROJECTION_EXPRS = 13

# ProjectionExprs and each of its ProjectionExpr entries.
PROJECTION_EXPRS_ENTRY = 1
PROJECTION_EXPR_ALIAS = 1

# FileGroup.
GROUP_FILES = 1

# PartitionedFile.
FILE_PATH = 1
FILE_SIZE = 2
FILE_RANGE = 5

# FileRange.
RANGE_START = 1
RANGE_END = 2

# Our own marker for a stage input inside stage plan bytes: a field number DataFusion's
# PhysicalPlanNode does not use, so a plan still holding a marker fails to deserialise.
INPUT_MARKER = 1000

# PhysicalPlanNode's oneof: the other nodes whose own fields we read or write.
PROJECTION = 4
HASH_JOIN = 9
COALESCE_PARTITIONS = 13
REPARTITION = 14
SORT = 10
FILTER = 12

# FilterExecNode: its predicate, a PhysicalExprNode.
FILTER_EXPR = 2
WINDOW_AGG = 15  # BoundedWindowAggExec and WindowAggExec alike
SORT_PRESERVING_MERGE = 21
GENERATE_SERIES = 33  # LazyMemoryExec of generate_series or range
COOPERATIVE = 32  # CooperativeExec: its stream yields to the scheduler every so many batches

# CooperativeExecNode.
COOPERATIVE_INPUT = 1

# PhysicalPlanNode's oneof: LocalLimitExec, and LocalLimitExecNode's input (its `fetch`, field 2,
# a uint32, is left out to mean 0: no row).
LOCAL_LIMIT = 7
LOCAL_LIMIT_INPUT = 1

# ProjectionExecNode.
PROJECTION_INPUT = 1

# HashJoinExecNode: its build (left) side, and how it reads it, an enum whose 0 (absent) is
# CollectLeft (collect the left side whole) and 1 Partitioned (both sides hash partitioned).
HASH_JOIN_LEFT = 1
HASH_JOIN_PARTITION_MODE = 6

# CoalescePartitionsExecNode and RepartitionExecNode: their input.
COALESCE_PARTITIONS_INPUT = 1
REPARTITION_INPUT = 1

# SortExecNode and SortPreservingMergeExecNode: the sort keys, each a PhysicalExprNode whose
# oneof holds a PhysicalSortExprNode, which holds the expression sorted by.
SORT_KEYS = 2
EXPR_SORT = 10
SORT_EXPR_EXPR = 1

# WindowAggExecNode: its window expressions, and each one's PARTITION BY expressions.
WINDOW_EXPRS = 2
WINDOW_PARTITION_BY = 5

# GenerateSeriesNode: its output schema and the oneof of its arguments.
GENERATE_SERIES_SCHEMA = 1
GENERATE_SERIES_INT64_ARGS = 4
GENERATE_SERIES_TIMESTAMP_ARGS = 5
GENERATE_SERIES_DATE_ARGS = 6
TIMESTAMP_ARGS_TZ = 4  # GenerateSeriesArgsTimestamp

# datafusion_common's Schema, Field, ArrowType and Timestamp: the one column a series makes.
SCHEMA_COLUMNS = 1
FIELD_NAME = 1
FIELD_ARROW_TYPE = 2
ARROW_TYPE_INT64 = 10
ARROW_TYPE_TIMESTAMP = 20
TIMESTAMP_TIME_UNIT = 1
TIMESTAMP_TIMEZONE = 2
TIME_UNIT_NANOSECOND = 3  # TimeUnit enum value

# PhysicalPlanNode's oneof: a scan of record batches held in the plan (a MemTable,
# `from_pandas`, `register_record_batches`), and the MemoryScanExecNode fields we read.
MEMORY_SCAN = 35
MEMORY_PARTITIONS = 1  # repeated bytes: each partition's batches as one Arrow IPC stream
MEMORY_SORT_INFORMATION = 4  # orderings the scan declares
MEMORY_FETCH = 6  # a limit pushed into the scan

# PhysicalPlanNode's oneof: the file sinks (DataSinkExec of COPY, INSERT and DataFrame writes).
JSON_SINK = 24
CSV_SINK = 28
PARQUET_SINK = 29
SINK_KINDS = {JSON_SINK: "json", CSV_SINK: "csv", PARQUET_SINK: "parquet"}

# Every *SinkExecNode: its sink; every *Sink: its FileSinkConfig.
SINK_EXEC_SINK = 2
SINK_CONFIG = 1

# FileSinkConfig.
SINK_OBJECT_STORE_URL = 1
SINK_TABLE_PATHS = 3
SINK_PARTITION_COLS = 5
SINK_FILE_EXTENSION = 11
SINK_FILE_OUTPUT_MODE = 12  # an enum: 0 (absent) lets the path decide between a file and a folder

# PartitionColumn.
PARTITION_COLUMN_NAME = 1

# CsvSink: its CsvWriterOptions, and the options' date and time formats.
CSV_SINK_WRITER_OPTIONS = 2
CSV_DATE_FORMAT = 4
CSV_DATETIME_FORMAT = 5
CSV_TIMESTAMP_FORMAT = 6
CSV_TIME_FORMAT = 7
