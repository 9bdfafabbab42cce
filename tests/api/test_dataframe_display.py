"""How a DistributedDataFrame shows itself: the first rows, computed distributed, drawn as
datafusion-python draws a DataFrame (text and HTML), with a summary of the run in HTML."""

from __future__ import annotations

import html
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import DataFrame, SessionContext
from datafusion.dataframe_formatter import configure_formatter, reset_formatter

from datafusion_distributed import DistributedConfig, DistributedContext

GROUPED = "SELECT k, count(*) AS n, min(s) AS first_s FROM t GROUP BY k ORDER BY k"


@pytest.fixture(scope="module")
def single_node(tmp_path_factory) -> SessionContext:
    """A table in four Parquet files (so its scan splits into tasks), with values that are markup."""
    folder = tmp_path_factory.mktemp("t")
    for part in range(4):
        xs = list(range(part * 500, (part + 1) * 500))
        pq.write_table(
            pa.table({"k": [x % 13 for x in xs], "s": [f"<b>{x}&</b>" for x in xs]}),
            folder / f"part-{part}.parquet",
        )
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    return ctx


@pytest.fixture(scope="module")
def dctx(single_node):
    # small partitions, so a few kilobytes make several tasks and stages
    with DistributedContext(single_node, config=DistributedConfig(bytes_per_partition=1024)) as dctx:
        yield dctx


@pytest.fixture(autouse=True)
def default_formatter():
    reset_formatter()
    yield
    reset_formatter()


def cells(page: str) -> list[str]:
    """The table cells of an HTML page, unescaped."""
    return [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", page)]


def test_repr_is_datafusions_text_table_of_the_first_rows(single_node, dctx):
    expected = DataFrame.default_str_repr(
        single_node.sql(GROUPED).limit(10).collect(), single_node.sql(GROUPED).schema(), True, "x"
    )
    assert repr(dctx.sql(GROUPED)) == "Distributed" + expected
    assert repr(dctx.sql(GROUPED)).splitlines()[-1] == "Data truncated."


def test_repr_of_a_short_and_an_empty_result(single_node, dctx):
    query = "SELECT k, count(*) AS n FROM t WHERE k < 3 GROUP BY k ORDER BY k"
    text = repr(dctx.sql(query))
    assert text == "Distributed" + DataFrame.default_str_repr(
        single_node.sql(query).collect(), single_node.sql(query).schema(), False, "x"
    )
    assert "truncated" not in text
    assert repr(dctx.sql("SELECT * FROM t WHERE k > 100")) == "No data to display"


def test_html_is_an_escaped_table_of_the_first_rows_with_a_summary(single_node, dctx):
    df = dctx.sql(GROUPED)
    page = df._repr_html_()
    expected = single_node.sql(GROUPED).limit(10).to_pylist()
    assert cells(page) == [str(v) for row in expected for v in row.values()]
    assert "<b>0&</b>" not in page and "&lt;b&gt;0&amp;&lt;/b&gt;" in page  # values are text, not markup
    plan = df.distributed_plan()
    stages, tasks = len(plan.stages), sum(s.task_count for s in plan.stages)
    assert stages > 1
    summary = re.search(r"<div style=[^>]*>([^<]*)</div>\s*$", page).group(1)
    assert summary.startswith(f"{stages} stages, {tasks} tasks · first 10 rows shown, more rows not shown · ")
    assert df.metrics is not None and df.metrics.finished  # the preview's run


def test_the_formatter_settings_apply(single_node, dctx):
    configure_formatter(max_rows=3, min_rows=1)
    df = dctx.sql(GROUPED)
    assert len(cells(df._repr_html_())) == 3 * 3
    assert repr(df).count("\n| ") == 1 + 3  # the header and three rows
    bundle = df._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"} and "first 3 rows shown" in bundle["text/html"]


def test_a_failed_query_shows_its_error_once(dctx):
    bundle = dctx.sql("SELECT CAST(s AS INT) AS i FROM t")._repr_mimebundle_()
    assert bundle["text/plain"].startswith("QueryFailed: ") and "Cast error" in bundle["text/plain"]
    with pytest.raises(Exception, match="Cast error"):
        repr(dctx.sql("SELECT CAST(s AS INT) AS i FROM t"))
