"""Fixtures of the work-unit feed tests."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.fixture(scope="module")
def dim_path(tmp_path_factory) -> str:
    """A parquet table `dim` (tag, label) of 2000 rows joining the events' tags."""
    folder = tmp_path_factory.mktemp("dim")
    pq.write_table(
        pa.table({"tag": [f"t{i % 4}" for i in range(2000)], "label": [f"L{i}" for i in range(2000)]}),
        folder / "part-0.parquet",
    )
    return str(folder)
