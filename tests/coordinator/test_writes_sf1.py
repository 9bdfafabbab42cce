"""Distributed writes at scale: TPC-H SF 1 `lineitem` (6 M rows) written through a 3-worker
`LocalCluster` gives exactly the rows single-node DataFusion writes, from more than one task,
and survives a worker killed in the middle of the write.

Six million rows do not fit comfortably in Python lists, so outputs are compared by DataFusion
queries over the two folders: the same schema, the same row count, (l_orderkey, l_linenumber)
unique on both sides, and no row of either side missing from the other.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from datafusion import DataFrameWriteOptions, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.coordinator.writes import STAGING_FOLDER
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data

pytestmark = pytest.mark.slow

KEYS = "l_orderkey, l_linenumber"
PARTITION_COLUMN = "l_returnflag"
KILL_WAIT_SECONDS = 120  # for the first staged file of the write to appear


@pytest.fixture(scope="module")
def tpch_sf1() -> Path:
    """TPC-H at scale factor 1 (about 350 MB, `lineitem` 6,001,215 rows); cached across runs."""
    return tpch_data(1)


@pytest.fixture(scope="module")
def single_node(tpch_sf1) -> SessionContext:
    """Single-node DataFusion over SF 1: what the distributed writes must match."""
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf1)
    return ctx


@pytest.fixture(scope="module")
def dctx(tpch_sf1, distributed_tpch) -> Iterator[DistributedContext]:
    with LocalCluster(3) as cluster:
        with distributed_tpch(tpch_sf1, workers=cluster) as dctx:
            yield dctx


@pytest.fixture
def out(tmp_path) -> Iterator[Path]:
    """A folder for the test's outputs, deleted afterwards: SF 1 as CSV is about 750 MB per copy."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def written_files(folder: Path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, _, names in os.walk(folder)
        for name in names
    )


def writing_tasks(folder: Path) -> set[str]:
    """The tasks whose files are in `folder`: committed files are `<query id>-<task>-<name>`."""
    return {os.path.basename(name).split("-")[1] for name in written_files(folder)}


def register_output(
    ctx: SessionContext, name: str, folder: Path, file_format: str, partitioned: bool
) -> None:
    partitions = [(PARTITION_COLUMN, pa.string())] if partitioned else None
    if file_format == "PARQUET":
        ctx.register_parquet(name, str(folder), table_partition_cols=partitions)
    else:  # only the Parquet write is partitioned
        ctx.register_csv(name, str(folder), has_header=True)


def scalar(ctx: SessionContext, sql: str):
    return ctx.sql(sql).to_arrow_table().column(0)[0].as_py()


def assert_same_rows(got: Path, expected: Path, file_format: str, *, partitioned: bool = False) -> int:
    """Read both folders back with plain DataFusion and check they hold the same rows; returns the
    row count. DataFusion's EXCEPT ALL is an anti join (duplicates are not counted), so the keys
    are checked unique on both sides: then equal counts and nothing missing either way mean the
    same rows exactly."""
    ctx = SessionContext()
    register_output(ctx, "got", got, file_format, partitioned)
    register_output(ctx, "expected", expected, file_format, partitioned)
    assert ctx.table("got").schema() == ctx.table("expected").schema()
    rows = scalar(ctx, "SELECT count(*) FROM expected")
    assert scalar(ctx, "SELECT count(*) FROM got") == rows
    for side in ("got", "expected"):
        distinct = scalar(ctx, f"SELECT count(*) FROM (SELECT DISTINCT {KEYS} FROM {side})")
        assert distinct == rows, f"{side}: {rows - distinct} rows written twice"
    for left, right in (("got", "expected"), ("expected", "got")):
        missing = f"SELECT * FROM {left} EXCEPT ALL SELECT * FROM {right}"
        if scalar(ctx, f"SELECT count(*) FROM ({missing})") != 0:
            sample = ctx.sql(f"{missing} ORDER BY {KEYS} LIMIT 5").to_pylist()
            raise AssertionError(f"rows of {left} not in {right}, first ones: {sample}")
    return rows


def test_write_parquet_partitioned(dctx, single_node, out):
    dctx.table("lineitem").write_parquet(out / "dist", partition_by=[PARTITION_COLUMN])
    single_node.table("lineitem").write_parquet(
        str(out / "single"), write_options=DataFrameWriteOptions(partition_by=[PARTITION_COLUMN])
    )
    assert sorted(os.listdir(out / "dist")) == sorted(os.listdir(out / "single"))
    assert not (out / "dist" / STAGING_FOLDER).exists()
    assert len(writing_tasks(out / "dist")) > 1, written_files(out / "dist")
    assert assert_same_rows(out / "dist", out / "single", "PARQUET", partitioned=True) == 6_001_215


@pytest.mark.parametrize("file_format", ["PARQUET", "CSV"])
def test_copy(dctx, single_node, out, file_format):
    copy = "COPY (SELECT * FROM lineitem) TO '{}' STORED AS " + file_format
    count = dctx.sql(copy.format(out / "dist")).to_arrow_table()
    expected = single_node.sql(copy.format(out / "single")).to_arrow_table()
    assert count == expected
    assert not (out / "dist" / STAGING_FOLDER).exists()
    assert len(writing_tasks(out / "dist")) > 1, written_files(out / "dist")
    rows = assert_same_rows(out / "dist", out / "single", file_format)
    assert rows == expected.column(0)[0].as_py() == 6_001_215
    if file_format == "PARQUET":  # decimals, dates and strings keep their types
        schema = SessionContext().read_parquet(str(out / "dist")).schema()
        assert schema.field("l_extendedprice").type == pa.decimal128(15, 2)
        assert schema.field("l_shipdate").type == pa.date32()
        assert pa.types.is_string_view(schema.field("l_comment").type) or pa.types.is_string(
            schema.field("l_comment").type
        )


def wait_for_a_staged_file(staging: Path) -> None:
    """Wait until a task has begun writing a file under `staging` (bounded)."""
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while time.monotonic() < deadline:
        if staging.exists() and written_files(staging):
            return
        time.sleep(0.02)
    raise AssertionError(f"no task started writing under {staging} in {KILL_WAIT_SECONDS} s")


def test_a_worker_killed_mid_write_leaves_the_destination_complete(tpch_sf1, single_node, out):
    copy = "COPY (SELECT * FROM lineitem) TO '{}' STORED AS PARQUET"
    with LocalCluster(3) as cluster:
        ctx = SessionContext()
        register_tpch(ctx, tpch_sf1)
        with DistributedContext(ctx, workers=cluster, config=DistributedConfig(connect_timeout=10)) as dctx:
            df = dctx.sql(copy.format(out / "dist"))
            plan = df.distributed_plan()
            assert plan.stages[-1].task_count == 3  # one task per worker: a kill lands on a writing task
            errors: list[BaseException] = []

            def kill_mid_write() -> None:
                try:
                    wait_for_a_staged_file(out / "dist" / STAGING_FOLDER)
                    cluster.kill(1)
                except BaseException as exc:  # reported by the test thread below
                    errors.append(exc)

            killer = threading.Thread(target=kill_mid_write)
            killer.start()
            try:
                count = df.to_arrow_table()
            finally:
                killer.join()
            assert not errors, errors
            retried = [t for s in df.metrics.stages.values() for t in s.tasks if t.attempt > 0]
    assert retried, "the kill landed after the write: nothing was retried"
    expected = single_node.sql(copy.format(out / "single")).to_arrow_table()
    assert count == expected
    assert not (out / "dist" / STAGING_FOLDER).exists()
    assert assert_same_rows(out / "dist", out / "single", "PARQUET") == 6_001_215
