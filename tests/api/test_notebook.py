"""A real notebook, executed headlessly in a Jupyter kernel: a distributed query shows its
first rows as an HTML table, and a progress line that ends saying how the query ended."""

from __future__ import annotations

import html
import json
import re
import shutil
import sys
from pathlib import Path

import nbclient
import nbformat
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

KERNEL = "datafusion-distributed-test"
QUERY = "SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k ORDER BY k"
EXAMPLE = Path(__file__).parents[2] / "examples" / "notebook.ipynb"
SECONDS = 120  # for the whole notebook: a kernel that never answers fails the test, it does not hang it


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> str:
    """A kernel spec running this interpreter (so this package and its dependencies), found
    first on JUPYTER_PATH: no installed kernel, and nothing from the user's own settings
    (IPython profile, runtime folder)."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return KERNEL


@pytest.fixture
def table(tmp_path) -> str:
    """200,000 rows in four Parquet files: enough for several tasks and stages."""
    folder = tmp_path / "t"
    folder.mkdir()
    for part in range(4):
        xs = range(part * 50_000, (part + 1) * 50_000)
        pq.write_table(pa.table({"k": [x % 17 for x in xs], "v": list(xs)}), folder / f"part-{part}.parquet")
    return str(folder)


def run_notebook(cells: list[str], kernel: str, folder) -> list:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return execute(notebook, kernel, folder)


def execute(notebook, kernel: str, folder) -> list:
    """Run every cell in a new kernel started in `folder`; the outputs of each cell."""
    client = nbclient.NotebookClient(
        notebook, timeout=SECONDS, kernel_name=kernel, resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    return [cell.get("outputs", []) for cell in notebook.cells]


def table_rows(page: str) -> list[list[str]]:
    """The data rows of an HTML table, each cell unescaped."""
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", page, re.S)]
    return [[html.unescape(cell) for cell in row] for row in rows if row]


def progress_lines(outputs: list) -> list[str]:
    return [
        o["data"]["text/plain"]
        for o in outputs
        if o["output_type"] == "display_data" and o["data"].get("text/plain", "").startswith("stages ")
    ]


def test_a_notebook_shows_a_table_and_progress(kernel, table, tmp_path):
    setup = f"""
from datafusion import SessionContext
from datafusion_distributed import DistributedConfig, DistributedContext
ctx = SessionContext()
ctx.register_parquet("t", {table!r})
dctx = DistributedContext(ctx, config=DistributedConfig(bytes_per_partition=64 * 1024), progress=True)
print("progress by default:", DistributedContext(ctx, workers=["grpc://127.0.0.1:1"]).progress)
"""
    shown = f"dctx.sql({QUERY!r})"
    failing = "try:\n    dctx.sql('SELECT v / (v - 1000) AS r FROM t').collect()\nexcept Exception as e:\n    print(type(e).__name__)"
    setup_out, shown_out, failing_out, _ = run_notebook(
        [setup, shown, failing, "dctx.close()"], kernel, tmp_path
    )

    assert [o.get("text") for o in setup_out] == ["progress by default: True\n"]

    result = [o for o in shown_out if o["output_type"] == "execute_result"]
    assert len(result) == 1
    page = result[0]["data"]["text/html"]
    assert "<table" in page
    expected = SessionContext()
    expected.register_parquet("t", table)
    assert table_rows(page) == [
        [str(v) for v in row.values()] for row in expected.sql(QUERY).limit(10).to_pylist()
    ]
    assert "more rows not shown" in page and " stages, " in page
    assert result[0]["data"]["text/plain"].startswith("DistributedDataFrame()\n+")

    [line] = progress_lines(shown_out)  # one output, updated in place
    stages = re.match(r"stages (\d+)/(\d+) ", line)
    assert stages and stages.group(1) == stages.group(2) and int(stages.group(2)) > 1
    assert line.endswith(" · finished")

    [line] = progress_lines(failing_out)
    assert line.endswith(" · failed")
    assert any(o.get("text") == "QueryFailed\n" for o in failing_out)


def test_the_example_notebook_runs(kernel, tmp_path):
    notebook = nbformat.read(EXAMPLE, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not cell.outputs and cell.execution_count is None for cell in code)  # kept cleared
    outputs = execute(notebook, kernel, tmp_path)  # raises on a cell's error
    pages = [o["data"]["text/html"] for cell in outputs for o in cell if o["output_type"] == "execute_result"]
    assert len(pages) == 2 and all("<table" in page for page in pages)

    made: dict = {}
    exec(code[0].source, made)  # the notebook's made-up table again (the notebook deletes its own)
    single_node = SessionContext()
    single_node.register_parquet("sales", made["data"])
    query = next(cell.source for cell in code if "GROUP BY region" in cell.source).split('"""')[1]
    try:
        assert table_rows(pages[0]) == [
            [str(v) for v in row.values()] for row in single_node.sql(query).to_pylist()
        ]
    finally:
        shutil.rmtree(made["data"])
    assert any(line.endswith(" · finished") for cell in outputs for line in progress_lines(cell))
