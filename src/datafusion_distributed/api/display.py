"""How a DistributedDataFrame shows itself: its first rows as text (`repr`) or, in a notebook,
as an HTML table with a line saying how the query ran, both in datafusion-python's style.

Only the first rows are computed: the query runs distributed with a limit of the rows shown
plus one, the extra row telling whether there are more. How many rows, and the table's look,
come from datafusion-python's own formatter (`datafusion.dataframe_formatter`), so its
settings (`configure_formatter(max_rows=...)`) apply here too."""

from __future__ import annotations

import copy
import html
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from datafusion import DataFrame
from datafusion.dataframe_formatter import DataFrameHtmlFormatter, get_formatter

from ..execution_plans.stage import DistributedPlan
from ..metrics.explain import format_seconds
from ..metrics.query_metrics import QueryMetrics

NO_DATA = "No data to display"  # datafusion-python's words for an empty result
SUMMARY_STYLE = "font-size: 0.85em; color: #555; margin-top: 4px;"


@dataclass(frozen=True)
class Preview:
    """The first rows of a query's result, and how the query that computed them ran.

    Attributes:
        table: at most `rows` rows, in the result's order.
        has_more: whether the result has more rows than those shown.
        stages, tasks: how the query was cut (the head stage counts as a stage).
        seconds: how long the query took.
        single_node: why it ran on one node ("" when it ran distributed).
    """

    table: pa.Table
    has_more: bool
    stages: int
    tasks: int
    seconds: float
    single_node: str = ""

    @classmethod
    def of(cls, table: pa.Table, rows: int, plan: DistributedPlan, metrics: QueryMetrics | None) -> Preview:
        """The preview of `table`, the result of `plan` limited to `rows + 1` rows, whose run
        measured `metrics` (None if it measured nothing)."""
        return cls(
            table=table.slice(0, rows),
            has_more=table.num_rows > rows,
            stages=len(plan.stages),
            tasks=sum(stage.task_count for stage in plan.stages),
            seconds=metrics.seconds if metrics is not None else 0.0,
            single_node=plan.single_node,
        )

    def summary(self) -> str:
        """One line: stages and tasks, the rows shown (and whether more were left out), the time."""
        if self.stages > 1 or self.tasks > 1:
            how = f"{self.stages} stage{_s(self.stages)}, {self.tasks} task{_s(self.tasks)}"
        else:
            how = "one node" + (f" ({self.single_node})" if self.single_node else "")
        rows = self.table.num_rows
        shown = (
            f"first {rows} row{_s(rows)} shown, more rows not shown"
            if self.has_more
            else f"{rows} row{_s(rows)}"
        )
        return f"{how} · {shown} · {format_seconds(self.seconds)}"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def render_text(shown: Preview) -> str:
    """The rows as datafusion-python's `repr` draws them (a bordered table, "Data truncated."
    when there are more), headed `DistributedDataFrame()`."""
    batches = [b for b in shown.table.to_batches() if b.num_rows]
    if not batches:
        return NO_DATA
    text = DataFrame.default_str_repr(batches, shown.table.schema, shown.has_more, str(uuid.uuid4()))
    return "Distributed" + text if text.startswith("DataFrame()") else text


def render_html(shown: Preview) -> str:
    """The rows as datafusion-python's HTML table (its formatter and styles, values escaped),
    with the summary line under it."""
    batches = [b for b in shown.table.to_batches() if b.num_rows]
    summary = f'<div style="{SUMMARY_STYLE}">{html.escape(shown.summary())}</div>'
    if not batches:
        return f"<div>{NO_DATA}</div>\n{summary}"
    formatter = _escaping(get_formatter())
    table = formatter.format_html(batches, shown.table.schema, shown.has_more, f"df-{uuid.uuid4()}")
    return f"{table}\n{summary}"


def render_error(error: BaseException) -> dict[str, str]:
    """A notebook output naming why the query failed (instead of a traceback per format)."""
    message = f"{type(error).__name__}: {error}"
    return {"text/plain": message, "text/html": f"<pre>{html.escape(message)}</pre>"}


def _escaping(formatter: DataFrameHtmlFormatter) -> DataFrameHtmlFormatter:
    """A copy of the user's formatter that escapes values and column names.

    datafusion-python's formatter puts `str(value)` into the page as it is, so a value such
    as `<script>` would be markup. Formatters the user registered for a type, and custom cell
    or header builders, still come first and are trusted to write HTML."""
    escaping = copy.copy(formatter)
    # A new registry: the copy must not add the escaping formatter to the user's own.
    escaping._type_formatters = {**getattr(formatter, "_type_formatters", {}), object: _escaped_value}
    if getattr(formatter, "_custom_header_builder", None) is None:
        style = formatter.style_provider.get_header_style()
        escaping.set_custom_header_builder(
            lambda field: f"<th style='{style}'>{html.escape(str(field.name))}</th>"
        )
    return escaping


def _escaped_value(value: Any) -> str:
    return html.escape(str(value))
