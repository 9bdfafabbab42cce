"""File scans inside plan bytes: read their file groups, keep a subset, build input leaves.

A DataFusion file scan (`DataSourceExec`) serialises as a PhysicalPlanNode whose oneof holds a
`*ScanExecNode`; its `base_conf` lists file groups, one per output partition. Keeping a subset
of the groups restricts the scan to those partitions (the upstream's PartitionIsolator).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import fields as F
from .wire import LEN, Field, WireError, encode_len_field, encode_varint_field, iter_fields


@dataclass(frozen=True)
class ScannedFile:
    """One file (or byte range of a file) that a scan partition reads."""

    path: str
    size: int
    range: tuple[int, int] | None = None

    @property
    def local_path(self) -> str:
        """Where the file is on this machine, if it is a local file (a scan names local files
        by their absolute path without the root)."""
        return "/" + self.path

    @property
    def bytes_read(self) -> int:
        """Bytes the scan reads from this file: its byte range if it has one, else the whole file."""
        return self.range[1] - self.range[0] if self.range else self.size


def _scan_field(node: bytes) -> Field | None:
    """The oneof field of a plan node if it is a file scan, else None."""
    try:
        top = list(iter_fields(node))
    except WireError:
        return None
    if len(top) == 1 and top[0].number in F.SCAN_KINDS and top[0].wire_type == LEN:
        return top[0]
    return None


def scan_kind(node: bytes) -> str | None:
    """'parquet', 'csv', 'json', 'arrow' or 'avro' for a file scan node, else None."""
    field = _scan_field(node)
    return F.SCAN_KINDS[field.number] if field else None


def _base_conf(node: bytes) -> tuple[Field, bytes, Field, bytes]:
    outer = _scan_field(node)
    if outer is None:
        raise WireError("not a file scan node")
    scan = outer.payload(node)
    confs = [f for f in iter_fields(scan) if f.number == F.SCAN_BASE_CONF]
    if len(confs) != 1:
        raise WireError("file scan without a base_conf")
    return outer, scan, confs[0], confs[0].payload(scan)


def _with_conf(node: bytes, conf: bytes) -> bytes:
    outer, scan, conf_field, _ = _base_conf(node)
    new_scan = scan[: conf_field.start] + encode_len_field(F.SCAN_BASE_CONF, conf) + scan[conf_field.end :]
    return node[: outer.start] + encode_len_field(outer.number, new_scan) + node[outer.end :]


def file_groups(node: bytes) -> list[list[ScannedFile]]:
    """The files each partition of a scan reads."""
    _, _, _, conf = _base_conf(node)
    groups = []
    for group in iter_fields(conf):
        if group.number != F.CONF_FILE_GROUPS:
            continue
        payload = group.payload(conf)
        files = [_decode_file(f.payload(payload)) for f in iter_fields(payload) if f.number == F.GROUP_FILES]
        groups.append(files)
    return groups


def object_store_url(node: bytes) -> str:
    """The URL of the store a scan reads its files from ("file:///" for local files)."""
    _, _, _, conf = _base_conf(node)
    urls = [f.payload(conf) for f in iter_fields(conf) if f.number == F.CONF_OBJECT_STORE_URL]
    return urls[0].decode() if urls else ""


def _decode_file(buf: bytes) -> ScannedFile:
    path, size, rng = "", 0, None
    for f in iter_fields(buf):
        if f.number == F.FILE_PATH:
            path = f.payload(buf).decode()
        elif f.number == F.FILE_SIZE:
            size = f.value
        elif f.number == F.FILE_RANGE:
            bounds = {g.number: g.value for g in iter_fields(f.payload(buf))}
            rng = (bounds.get(F.RANGE_START, 0), bounds.get(F.RANGE_END, 0))
    return ScannedFile(path, size, rng)


def restrict_file_groups(node: bytes, keep: list[int]) -> bytes:
    """Keep only the file groups (partitions) at indices `keep`, in that order."""
    _, _, _, conf = _base_conf(node)
    parts = list(iter_fields(conf))
    groups = [f for f in parts if f.number == F.CONF_FILE_GROUPS]
    for index in keep:
        if not 0 <= index < len(groups):
            raise IndexError(f"file group {index} out of range: the scan has {len(groups)}")
    kept = b"".join(conf[groups[i].start : groups[i].end] for i in keep)
    others = b"".join(conf[f.start : f.end] for f in parts if f.number != F.CONF_FILE_GROUPS)
    return _with_conf(node, kept + others)


def without_files(node: bytes, paths: set[str]) -> bytes:
    """A copy of scan `node` that does not read the files at `paths`: every partition keeps
    its other files (a partition may be left with none), each as it was, byte range included.
    The scan's statistics described the files it had, so they are dropped (left unknown)."""
    _, _, _, conf = _base_conf(node)
    kept = b""
    for part in iter_fields(conf):
        if part.number == F.CONF_STATISTICS:
            continue
        if part.number != F.CONF_FILE_GROUPS:
            kept += conf[part.start : part.end]
            continue
        group = part.payload(conf)
        files = b"".join(
            group[f.start : f.end]
            for f in iter_fields(group)
            if f.number != F.GROUP_FILES or _decode_file(f.payload(group)).path not in paths
        )
        kept += encode_len_field(F.CONF_FILE_GROUPS, files)
    return _with_conf(node, kept + encode_len_field(F.CONF_STATISTICS, b""))


def _encode_file(file: ScannedFile) -> bytes:
    return encode_len_field(F.FILE_PATH, file.path.encode()) + encode_varint_field(F.FILE_SIZE, file.size)


def with_file_groups(template: bytes, groups: list[list[ScannedFile]]) -> bytes:
    """A copy of scan `template` reading `groups`, one partition per group (groups may be empty).

    The template's statistics describe its own files, so they are dropped (left unknown).
    """
    _, _, _, conf = _base_conf(template)
    others = b"".join(
        conf[f.start : f.end]
        for f in iter_fields(conf)
        if f.number not in (F.CONF_FILE_GROUPS, F.CONF_STATISTICS)
    )
    encoded = b"".join(
        encode_len_field(
            F.CONF_FILE_GROUPS, b"".join(encode_len_field(F.GROUP_FILES, _encode_file(f)) for f in group)
        )
        for group in groups
    )
    return _with_conf(template, encoded + others + encode_len_field(F.CONF_STATISTICS, b""))


def with_output_names(node: bytes, names: list[str]) -> bytes:
    """A copy of scan `node` whose output columns are called `names` (its projection aliases).

    Exchange files carry unique column names; this gives a plan back the names it had,
    repeated ones included, without adding a node.
    """
    _, _, _, conf = _base_conf(node)
    parts = list(iter_fields(conf))
    projections = [f for f in parts if f.number == F.CONF_PROJECTION_EXPRS]
    if len(projections) != 1:
        raise WireError("scan without projection expressions")
    exprs = projections[0].payload(conf)
    entries = [f for f in iter_fields(exprs) if f.number == F.PROJECTION_EXPRS_ENTRY]
    if len(entries) != len(names):
        raise WireError(f"scan projects {len(entries)} columns, {len(names)} names given")
    renamed = b""
    for entry, name in zip(entries, names, strict=True):
        payload = entry.payload(exprs)
        kept = b"".join(
            payload[f.start : f.end] for f in iter_fields(payload) if f.number != F.PROJECTION_EXPR_ALIAS
        )
        renamed += encode_len_field(
            F.PROJECTION_EXPRS_ENTRY, encode_len_field(F.PROJECTION_EXPR_ALIAS, name.encode()) + kept
        )
    new_conf = b"".join(
        encode_len_field(f.number, renamed) if f is projections[0] else conf[f.start : f.end] for f in parts
    )
    return _with_conf(node, new_conf)


def as_parquet_scan(node: bytes, predicate: bytes | None = None) -> bytes:
    """The Arrow scan `node` made a Parquet scan of the same files, columns and partitions
    (the two keep their FileScanExecConf alike), pruning with `predicate` (a PhysicalExprNode
    over the scan's file schema) if given."""
    outer = _scan_field(node)
    if outer is None or outer.number != F.ARROW_SCAN:
        raise WireError("not an Arrow scan node")
    scan = outer.payload(node)
    confs = [f for f in iter_fields(scan) if f.number == F.SCAN_BASE_CONF]
    if len(confs) != 1:
        raise WireError("file scan without a base_conf")
    pruning = b"" if predicate is None else encode_len_field(F.PARQUET_PREDICATE, predicate)
    return encode_len_field(F.PARQUET_SCAN, scan[confs[0].start : confs[0].end] + pruning)


def filter_predicate(node: bytes) -> bytes | None:
    """The predicate (PhysicalExprNode bytes) of a FilterExec node, or None for another node."""
    try:
        top = list(iter_fields(node))
        if len(top) != 1 or top[0].number != F.FILTER or top[0].wire_type != LEN:
            return None
        body = top[0].payload(node)
        exprs = [f.payload(body) for f in iter_fields(body) if f.number == F.FILTER_EXPR]
    except WireError:
        return None
    return exprs[0] if len(exprs) == 1 else None
