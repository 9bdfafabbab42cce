"""File sinks inside plan bytes: where a write goes, and the same write sent elsewhere.

A DataFusion file write (`DataSinkExec: sink=ParquetSink(...)`, from COPY, INSERT into a
listing table or a DataFrame's write_*) serialises as a PhysicalPlanNode whose oneof holds a
`*SinkExecNode`; its sink's `FileSinkConfig` names the destination (`table_paths`), the hive
partition columns, the file extension and whether the path is a file or a folder. A task of
a distributed write runs the same node with `table_paths` pointing at its staging folder.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import fields as F
from .wire import LEN, VARINT, Field, WireError, encode_len_field, iter_fields, replace_field_payload


@dataclass(frozen=True)
class FileSink:
    """What a file sink node writes: its format, destination and hive partition columns."""

    kind: str  # "parquet", "csv" or "json"
    object_store_url: str  # e.g. "file:///"
    table_paths: tuple[str, ...]  # URLs; one for COPY and DataFrame writes
    partition_columns: tuple[str, ...]
    file_extension: str
    output_mode: int  # FileSinkConfig.file_output_mode; 0 lets the path decide

    @property
    def destination(self) -> str:
        """The one URL written to ("" when the sink names several)."""
        return self.table_paths[0] if len(self.table_paths) == 1 else ""

    @property
    def writes_folder(self) -> bool:
        """Whether the sink writes a folder of files (as DataFusion decides in automatic mode:
        hive partitions, a path ending in '/', or a last path segment without an extension)."""
        if self.output_mode != 0 or not self.destination:
            return False
        if self.partition_columns or self.destination.endswith("/"):
            return True
        return "." not in self.destination.rsplit("/", 1)[-1]


def _sink_parts(node: bytes) -> tuple[Field, bytes, Field, bytes, Field, bytes]:
    """(oneof field, *SinkExecNode, sink field, *Sink, config field, FileSinkConfig)."""
    top = list(iter_fields(node))
    if len(top) != 1 or top[0].number not in F.SINK_KINDS or top[0].wire_type != LEN:
        raise WireError("not a file sink node")
    exec_node = top[0].payload(node)
    sink_field = _one(exec_node, F.SINK_EXEC_SINK)
    sink = sink_field.payload(exec_node)
    config_field = _one(sink, F.SINK_CONFIG)
    return top[0], exec_node, sink_field, sink, config_field, config_field.payload(sink)


def _one(message: bytes, number: int) -> Field:
    found = [f for f in iter_fields(message) if f.number == number and f.wire_type == LEN]
    if len(found) != 1:
        raise WireError(f"expected one field {number}, found {len(found)}")
    return found[0]


def file_sink(node: bytes) -> FileSink | None:
    """The file sink `node` (one plan node's bytes) is, or None if it is none or unreadable."""
    try:
        top, *_, config = _sink_parts(node)
    except WireError:
        return None
    strings: dict[int, list[str]] = {}
    partitions, mode = [], 0
    try:
        for f in iter_fields(config):
            if f.number == F.SINK_FILE_OUTPUT_MODE and f.wire_type == VARINT:
                mode = f.value
            elif f.number == F.SINK_PARTITION_COLS and f.wire_type == LEN:
                column = f.payload(config)
                names = [c for c in iter_fields(column) if c.number == F.PARTITION_COLUMN_NAME]
                partitions.append(names[0].payload(column).decode() if names else "")
            elif f.wire_type == LEN:
                strings.setdefault(f.number, []).append(f.payload(config).decode("utf-8", "replace"))
    except WireError:
        return None
    return FileSink(
        kind=F.SINK_KINDS[top.number],
        object_store_url=(strings.get(F.SINK_OBJECT_STORE_URL) or [""])[0],
        table_paths=tuple(strings.get(F.SINK_TABLE_PATHS, ())),
        partition_columns=tuple(partitions),
        file_extension=(strings.get(F.SINK_FILE_EXTENSION) or [""])[0],
        output_mode=mode,
    )


def with_table_path(node: bytes, url: str) -> bytes:
    """`node`, a file sink, writing to `url` (a folder URL ending in '/') instead of its
    destination; every other byte as DataFusion wrote it."""
    top, exec_node, sink_field, sink, config_field, config = _sink_parts(node)
    paths = [f for f in iter_fields(config) if f.number == F.SINK_TABLE_PATHS]
    if len(paths) != 1:
        raise WireError(f"a file sink with {len(paths)} table paths")
    config = replace_field_payload(config, paths[0], url.encode())
    sink = replace_field_payload(sink, config_field, config)
    exec_node = replace_field_payload(exec_node, sink_field, sink)
    return node[: top.start] + encode_len_field(top.number, exec_node) + node[top.end :]


# The formats Arrow's CSV writer uses when none is set (checked by tests/codec/test_sink.py).
# DataFusion 55 decodes an unset format of a CSV sink as an empty one, which writes every
# date and timestamp as an empty value: a CSV sink that travels carries them explicitly.
CSV_DEFAULT_FORMATS = {
    F.CSV_DATE_FORMAT: "%Y-%m-%d",
    F.CSV_DATETIME_FORMAT: "%Y-%m-%dT%H:%M:%S%.f",
    F.CSV_TIMESTAMP_FORMAT: "%Y-%m-%dT%H:%M:%S%.f",
    F.CSV_TIME_FORMAT: "%H:%M:%S%.f",
}


def with_csv_formats(node: bytes) -> bytes:
    """`node` with Arrow's default date and time formats written into a CSV sink's options
    where the user set none (any other node is returned as it is)."""
    top, exec_node, sink_field, sink, *_ = _sink_parts(node)
    if top.number != F.CSV_SINK:
        return node
    found = [f for f in iter_fields(sink) if f.number == F.CSV_SINK_WRITER_OPTIONS and f.wire_type == LEN]
    options = found[0].payload(sink) if found else b""
    present = {f.number for f in iter_fields(options) if f.payload_start < f.end}
    added = b"".join(
        encode_len_field(n, v.encode()) for n, v in CSV_DEFAULT_FORMATS.items() if n not in present
    )
    if not added:
        return node
    if found:
        sink = replace_field_payload(sink, found[0], options + added)
    else:
        sink = sink + encode_len_field(F.CSV_SINK_WRITER_OPTIONS, added)
    exec_node = replace_field_payload(exec_node, sink_field, sink)
    return node[: top.start] + encode_len_field(top.number, exec_node) + node[top.end :]
