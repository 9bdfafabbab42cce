"""The bytes a scan reads, which size leaf stages: a Parquet scan counts its projected columns."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed.distributed_planner import scan_size
from datafusion_distributed.execution_plans.plan_node import PlanNode

ROWS = 20_000


def wide_table() -> pa.Table:
    """A narrow integer key and a wide text column: the text is nearly all of the file."""
    return pa.table(
        {"k": pa.array(range(ROWS), pa.int64()), "text": [f"{i:08d}-" + "x" * 200 for i in range(ROWS)]}
    )


@pytest.fixture
def folder(tmp_path):
    for part in range(3):
        pq.write_table(wide_table(), tmp_path / f"p{part}.parquet", compression="none", row_group_size=5000)
    return tmp_path


def scan_of(ctx: SessionContext, sql: str) -> PlanNode:
    scans = [
        n for n in PlanNode.from_plan(ctx.sql(sql).execution_plan()).walk() if n.name == "DataSourceExec"
    ]
    assert len(scans) == 1
    return scans[0]


def column_bytes(folder, column: str) -> int:
    """The compressed bytes of `column` in every file, from the footers (the oracle)."""
    total = 0
    for path in folder.iterdir():
        metadata = pq.read_metadata(path)
        for group in range(metadata.num_row_groups):
            for index in range(metadata.num_columns):
                chunk = metadata.row_group(group).column(index)
                total += chunk.total_compressed_size if chunk.path_in_schema == column else 0
    return total


def files_bytes(folder) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def test_a_parquet_scan_counts_only_the_columns_it_reads(folder):
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    narrow = scan_size.scanned_bytes(scan_of(ctx, "SELECT sum(k) FROM t"))
    wide = scan_size.scanned_bytes(scan_of(ctx, "SELECT k, text FROM t"))
    columns = column_bytes(folder, "k") + column_bytes(folder, "text")
    # each file's share of its column bytes, times the file: the footer's own bytes spread over both
    assert narrow == pytest.approx(files_bytes(folder) * column_bytes(folder, "k") / columns, rel=0.01)
    assert wide == files_bytes(folder)
    assert narrow < wide / 10


def test_a_rewritten_file_is_measured_again(folder):
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    before = scan_size.scanned_bytes(scan_of(ctx, "SELECT k FROM t")) / files_bytes(folder)
    for path in folder.iterdir():  # now the key is nearly all of each file
        pq.write_table(pa.table({"k": range(ROWS), "text": ["x"] * ROWS}), path)
        os.utime(path, ns=(1, 1))
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    after = scan_size.scanned_bytes(scan_of(ctx, "SELECT k FROM t")) / files_bytes(folder)
    assert before < 0.2 and after > 0.5


def test_other_scans_count_their_whole_files(tmp_path):
    pacsv.write_csv(wide_table(), tmp_path / "t.csv")
    ctx = SessionContext()
    ctx.register_csv("t", str(tmp_path / "t.csv"))
    assert (
        scan_size.scanned_bytes(scan_of(ctx, "SELECT sum(k) FROM t")) == (tmp_path / "t.csv").stat().st_size
    )


def test_an_unreadable_footer_counts_the_whole_file(folder, monkeypatch):
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    scan = scan_of(ctx, "SELECT sum(k) FROM t")
    scan_size._column_sizes.cache_clear()
    monkeypatch.setattr(scan_size.pq, "read_metadata", lambda path: (_ for _ in ()).throw(OSError("gone")))
    assert scan_size.scanned_bytes(scan) == files_bytes(folder)
    scan_size._column_sizes.cache_clear()


def test_a_scan_of_many_files_reads_a_sample_of_footers(tmp_path, monkeypatch):
    for part in range(3 * scan_size.SAMPLED_FILES - 1):  # not a multiple: the sample stays bounded
        pq.write_table(wide_table().slice(0, 500), tmp_path / f"p{part:03d}.parquet", compression="none")
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path))
    read = []
    original = scan_size.pq.read_metadata
    monkeypatch.setattr(scan_size.pq, "read_metadata", lambda path: (read.append(path), original(path))[1])
    scan_size._column_sizes.cache_clear()
    measured = scan_size.scanned_bytes(scan_of(ctx, "SELECT sum(k) FROM t"))
    assert len(read) <= scan_size.SAMPLED_FILES
    assert 0 < measured < files_bytes(tmp_path) / 3
