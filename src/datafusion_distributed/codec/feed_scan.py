"""Feed scans inside plan bytes: the Arrow scan a work-unit feed's table plans as.

A feed is registered as an Arrow IPC table over a folder of empty files (`feed_folder_name`:
the folder's name carries the feed's id and the tasks it asks for; the folder above it is
named after the feed's table). DataFusion plans filters, projections and limits over that
scan as over any files, and gives it as many partitions as it would a table of that many
files; the planner recognises it by its files' folder (`feed_scan_ref`) and shares its
partitions out to tasks like a file scan's. A task replaces its share of the files with files
it wrote from the units it read, one per partition; a feed of Parquet files (`parquet` at the
end of its folder's name) has its scan made a Parquet scan of the files its units name.
Empty Arrow files have no statistics, so DataFusion never answers from them (empty Parquet
files would give `count(*)` as 0 before any unit is read). The empty files are what a plan run
without the feed reads: no rows, never a wrong schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..common.display_lists import bracketed_list
from .scan import file_groups, scan_kind
from .wire import WireError

FEED_FILE_PREFIX = "datafusion-distributed-feed-"
_FEED_FILE = re.compile(
    re.escape(FEED_FILE_PREFIX) + r"([0-9a-f]{32})-tasks-(\d{1,6})(-parquet)?/part-\d{1,6}\.arrow$"
)


@dataclass(frozen=True)
class FeedScanRef:
    """The feed a scan reads: its id, the tasks it asks for (0: as many as the planner's
    task-count handlers choose), its table's name (for display), and the partitions
    DataFusion planned the scan with; `parquet` for a feed of Parquet files."""

    feed_id: str
    tasks: int
    name: str
    partitions: int
    parquet: bool = False


def feed_folder_name(feed_id: str, tasks: int, parquet: bool = False) -> str:
    """The name of the folder of empty Arrow files a feed's table is registered over."""
    if not re.fullmatch(r"[0-9a-f]{32}", feed_id):
        raise ValueError(f"a feed id is 32 lowercase hex digits, got {feed_id!r}")
    return f"{FEED_FILE_PREFIX}{feed_id}-tasks-{tasks}" + ("-parquet" if parquet else "")


def feed_file_name(index: int) -> str:
    """The name of file `index` in a feed's folder."""
    return f"part-{index}.arrow"


def projected_columns(line: str) -> tuple[str, ...] | None:
    """The table columns a scan's projection reads, from the scan's display line
    (`projection=[k, CAST(tag@3 AS Utf8View) as tag]` reads k and tag); None when the scan
    shows no projection or one this cannot read (then every column is read)."""
    items = bracketed_list(line, "projection=[")
    if items is None:
        return None  # no projection, or no closing bracket: the line was cut
    columns: list[str] = []
    for item in items:
        references = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)@\d+", item)
        if references:
            columns.extend(references)
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", item):
            columns.append(item)
        else:
            return None
    return tuple(dict.fromkeys(columns))


def is_plain_projection(line: str) -> bool:
    """Whether a scan, by its display line, only picks table columns by name (no expression,
    no limit): a scan of just those columns, in that order, then outputs the same."""
    columns = projected_columns(line)
    if not columns or "limit=" in line or "fetch=" in line:
        return False
    start = line.find("projection=[") + len("projection=[")
    shown = line[start : line.find("]", start)]
    return [item.strip() for item in shown.split(",")] == list(columns)


def collected_feed_scan(node: bytes) -> FeedScanRef:
    """The feed that `node`, found to be a feed scan (`feed_scan_ref`), scans."""
    ref = feed_scan_ref(node)
    if ref is None:
        raise ValueError("not a scan of a work-unit feed")
    return ref


def feed_scan_ref(node: bytes) -> FeedScanRef | None:
    """The feed `node` scans, or None when it is another node (or bytes we cannot read)."""
    if scan_kind(node) != "arrow":
        return None
    try:
        groups = file_groups(node)
    except WireError:
        return None
    found = [_FEED_FILE.search(f.path) for group in groups for f in group]
    matches = [m for m in found if m is not None]
    if not matches or len(matches) != len(found):
        return None
    if len({m.group(1, 2, 3) for m in matches}) != 1:
        return None  # never made by a registration: one feed's table is one folder
    first = matches[0]
    folder = first.string[: first.start()].rstrip("/")
    name = folder.rsplit("/", 1)[-1]
    return FeedScanRef(first.group(1), int(first.group(2)), name, len(groups), first.group(3) is not None)
