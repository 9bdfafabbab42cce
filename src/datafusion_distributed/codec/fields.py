"""Protobuf field numbers of DataFusion 55's physical plan messages that we read or write.

Checked against `datafusion/proto/proto/datafusion.proto` at 55.2.0 (the version the
`datafusion` wheel embeds) and pinned by tests/codec/test_fields.py, which fails loudly if a
new wheel moves any of them.
"""

# PhysicalPlanNode's oneof: the file scan variants.
PARQUET_SCAN = 1
CSV_SCAN = 2
AVRO_SCAN = 17  # (7 is LocalLimitExecNode)
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

# FileScanExecConf.
CONF_FILE_GROUPS = 1
CONF_STATISTICS = 6
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
