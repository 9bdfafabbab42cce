"""Fixtures of the protocol tests."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory):
    """A table `k` of 400 integers in four Parquet files."""
    folder = tmp_path_factory.mktemp("table")
    for part in range(4):
        pq.write_table(
            pa.table({"k": list(range(part * 100, part * 100 + 100))}), folder / f"p{part}.parquet"
        )
    return folder
