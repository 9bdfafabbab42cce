"""The table the command-line tests query."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.fixture
def table_dir(tmp_path):
    """A parquet folder `t` of 3 files: columns k (0-3) and v (0-399)."""
    folder = tmp_path / "t"
    folder.mkdir()
    for part in range(3):
        table = pa.table({"k": [i % 4 for i in range(part, 400, 3)], "v": list(range(part, 400, 3))})
        pq.write_table(table, folder / f"p{part}.parquet")
    return folder
