"""File scans inside plan bytes: reading, restricting and replacing their file groups."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec import (
    ScannedFile,
    file_groups,
    restrict_file_groups,
    scan_kind,
    with_file_groups,
    without_files,
)
from datafusion_distributed.codec import fields as F
from datafusion_distributed.codec.wire import WireError, iter_fields
from datafusion_distributed.runtime.inputs import local_file
from datafusion_distributed.runtime.session import task_session

FILES = 4
ROWS = 500  # per file; file i holds ids i*ROWS .. (i+1)*ROWS - 1
KINDS = ["parquet", "csv", "json", "arrow"]


def _part(i: int) -> pa.Table:
    ids = list(range(i * ROWS, (i + 1) * ROWS))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{v}" for v in ids]})


def _write(kind: str, table: pa.Table, path) -> None:
    if kind == "parquet":
        pq.write_table(table, path)
    elif kind == "csv":
        pcsv.write_csv(table, path)
    elif kind == "json":
        with open(path, "w") as out:
            out.writelines(json.dumps(row) + "\n" for row in table.to_pylist())
    else:
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Per kind: a folder of FILES files and a separate one-file folder (the template)."""
    root = tmp_path_factory.mktemp("scan")
    out = {}
    for kind in KINDS:
        folder = root / kind
        folder.mkdir()
        for i in range(FILES):
            _write(kind, _part(i), folder / f"part-{i}.{kind}")
        template = root / f"{kind}-template"
        template.mkdir()
        _write(kind, _part(99), template / f"template.{kind}")
        out[kind] = (folder, template)
    return out


def _register(ctx: SessionContext, kind: str, name: str, path) -> None:
    register = {
        "parquet": ctx.register_parquet,
        "csv": ctx.register_csv,
        "json": ctx.register_json,
        "arrow": ctx.register_arrow,
    }[kind]
    register(name, str(path))


def _scan_bytes(kind: str, path, partitions: int = FILES) -> bytes:
    ctx = SessionContext(SessionConfig().with_target_partitions(partitions))
    _register(ctx, kind, "t", path)
    plan = ctx.sql("SELECT id, name FROM t").execution_plan()
    assert plan.display().startswith("DataSourceExec"), plan.display()
    return plan.to_bytes()


def _run(raw: bytes) -> tuple[int, list[list[int]]]:
    """Partition count and the ids each partition returns (task settings: no work stealing)."""
    ctx = task_session()
    plan = ExecutionPlan.from_bytes(ctx, raw)
    ids = []
    for partition in range(plan.partition_count):
        got = []
        for batch in ctx.execute(plan, partition):
            got.extend(batch.to_pyarrow().column("id").to_pylist())
        ids.append(sorted(got))
    return plan.partition_count, ids


def _ids(files: list[int]) -> list[int]:
    return sorted(v for i in files for v in range(i * ROWS, (i + 1) * ROWS))


@pytest.mark.parametrize("kind", KINDS)
def test_scan_kind(kind, data):
    assert scan_kind(_scan_bytes(kind, data[kind][0])) == kind


def test_scan_kind_of_other_nodes_and_garbage(data):
    ctx = SessionContext(SessionConfig().with_target_partitions(2))
    _register(ctx, "parquet", "t", data["parquet"][0])
    plan = ctx.sql("SELECT id FROM t WHERE id > 3 LIMIT 2").execution_plan()
    assert scan_kind(plan.to_bytes()) is None
    assert scan_kind(b"\xff\xff") is None
    assert scan_kind(b"") is None
    with pytest.raises(WireError, match="not a file scan"):
        file_groups(plan.to_bytes())


@pytest.mark.parametrize("kind", KINDS)
def test_file_groups_lists_one_group_per_file(kind, data):
    groups = file_groups(_scan_bytes(kind, data[kind][0]))
    assert len(groups) == FILES
    names = sorted(f.path.rsplit("/", 1)[-1] for g in groups for f in g)
    assert names == [f"part-{i}.{kind}" for i in range(FILES)]
    assert all(f.size > 0 and f.bytes_read == f.size for g in groups for f in g)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keep", [[0], [2], [3, 1], [0, 1, 2, 3]])
def test_restricted_scan_returns_exactly_the_kept_partitions(kind, keep, data):
    raw = _scan_bytes(kind, data[kind][0])
    groups = file_groups(raw)
    file_of_group = [int(g[0].path.rsplit("-", 1)[-1].split(".")[0]) for g in groups]
    restricted = restrict_file_groups(raw, keep)
    assert file_groups(restricted) == [groups[i] for i in keep]
    count, ids = _run(restricted)
    assert count == len(keep)
    assert ids == [_ids([file_of_group[i]]) for i in keep]


def test_restrict_to_no_partition_and_out_of_range(data):
    raw = _scan_bytes("parquet", data["parquet"][0])
    assert _run(restrict_file_groups(raw, [])) == (0, [])
    with pytest.raises(IndexError, match="file group 4 out of range: the scan has 4"):
        restrict_file_groups(raw, [4])
    with pytest.raises(IndexError):
        restrict_file_groups(raw, [-1])


def test_restricted_byte_ranges_partition_a_split_file(tmp_path):
    """One big parquet file split into byte ranges: the ranges together read every row once."""
    pq.write_table(pa.table({"id": list(range(100_000))}), tmp_path / "big.parquet", row_group_size=5_000)
    config = (
        SessionConfig().with_target_partitions(4).set("datafusion.optimizer.repartition_file_min_size", "1")
    )
    ctx = SessionContext(config)
    ctx.register_parquet("t", str(tmp_path / "big.parquet"))
    raw = ctx.sql("SELECT id FROM t").execution_plan().to_bytes()
    groups = file_groups(raw)
    assert len(groups) == 4 and all(f.range is not None for g in groups for f in g)
    seen = []
    for i in range(len(groups)):
        count, ids = _run(restrict_file_groups(raw, [i]))
        assert count == 1
        seen.extend(ids[0])
    assert sorted(seen) == list(range(100_000))


@pytest.mark.parametrize("kind", KINDS)
def test_with_file_groups_reads_the_given_files(kind, data):
    folder, template_folder = data[kind]
    template = _scan_bytes(kind, template_folder, partitions=1)
    files = {i: local_file(str(folder / f"part-{i}.{kind}")) for i in range(FILES)}
    groups = [[files[2]], [], [files[0], files[3]]]
    raw = with_file_groups(template, groups)
    assert scan_kind(raw) == kind
    assert file_groups(raw) == groups
    count, ids = _run(raw)
    assert count == 3
    assert ids == [_ids([2]), [], _ids([0, 3])]


def test_with_file_groups_drops_the_templates_statistics(data):
    template = _scan_bytes("parquet", data["parquet"][1], partitions=1)
    raw = with_file_groups(template, [[local_file(str(data["parquet"][0] / "part-1.parquet"))]])
    (outer,) = iter_fields(raw)
    scan = outer.payload(raw)
    (conf_field,) = [f for f in iter_fields(scan) if f.number == F.SCAN_BASE_CONF]
    conf = conf_field.payload(scan)
    stats = [f.payload(conf) for f in iter_fields(conf) if f.number == F.CONF_STATISTICS]
    assert stats == [b""]
    # DataFusion reads the rows, not the template's row count.
    assert ExecutionPlan.from_bytes(task_session(), raw).partition_count == 1
    assert _run(raw)[1] == [_ids([1])]


def test_with_file_groups_can_read_a_byte_range(tmp_path):
    pq.write_table(pa.table({"id": list(range(50_000))}), tmp_path / "big.parquet", row_group_size=5_000)
    config = (
        SessionConfig().with_target_partitions(2).set("datafusion.optimizer.repartition_file_min_size", "1")
    )
    ctx = SessionContext(config)
    ctx.register_parquet("t", str(tmp_path / "big.parquet"))
    raw = ctx.sql("SELECT id FROM t").execution_plan().to_bytes()
    first, second = file_groups(raw)
    # with_file_groups writes path and size only: a ranged file becomes a whole file.
    whole = with_file_groups(raw, [first])
    assert file_groups(whole) == [[ScannedFile(first[0].path, first[0].size)]]
    assert sorted(_run(whole)[1][0]) == list(range(50_000))


@pytest.mark.parametrize("kind", KINDS)
def test_without_files_keeps_every_partition_and_the_other_files(kind, data):
    raw = _scan_bytes(kind, data[kind][0], partitions=2)
    groups = file_groups(raw)
    dropped = {groups[0][0].path, *(f.path for f in groups[1])}
    kept = without_files(raw, dropped)
    assert file_groups(kept) == [[f for f in g if f.path not in dropped] for g in groups]
    left = [int(f.path.rsplit("part-", 1)[1].split(".")[0]) for f in file_groups(kept)[0]]
    assert _run(kept) == (2, [_ids(left), []])


def test_without_files_keeps_the_byte_ranges_of_the_files_left(tmp_path):
    for name in ("big", "other"):
        pq.write_table(
            pa.table({"id": list(range(50_000))}), tmp_path / f"{name}.parquet", row_group_size=5_000
        )
    config = (
        SessionConfig().with_target_partitions(3).set("datafusion.optimizer.repartition_file_min_size", "1")
    )
    ctx = SessionContext(config)
    ctx.register_parquet("t", str(tmp_path))
    raw = ctx.sql("SELECT id FROM t").execution_plan().to_bytes()
    groups = file_groups(raw)
    assert any(f.range is not None for g in groups for f in g)
    other = next(f.path for g in groups for f in g if f.path.endswith("other.parquet"))
    kept = without_files(raw, {other})
    assert file_groups(kept) == [[f for f in g if f.path != other] for g in groups]
    assert sorted(v for part in _run(kept)[1] for v in part) == list(range(50_000))


def test_avro_scans_do_not_serialise_in_this_wheel(tmp_path):
    """The wheel is built without DataFusion's avro proto support: plans over avro tables
    cannot be shipped to workers. If this starts failing, avro serialises: pin its scan
    (codec/fields.py AVRO_SCAN) with a real plan in test_fields.py and cover it here."""
    fastavro = pytest.importorskip("fastavro")
    schema = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]}
    with open(tmp_path / "t.avro", "wb") as out:
        fastavro.writer(out, schema, [{"id": i} for i in range(10)])
    ctx = SessionContext()
    ctx.register_avro("t", str(tmp_path / "t.avro"))
    plan = ctx.sql("SELECT id FROM t").execution_plan()
    assert "file_type=avro" in plan.display()
    assert ctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 10}]
    with pytest.raises(Exception, match="PhysicalExtensionCodec is not provided"):
        plan.to_bytes()
