"""Feed scans inside plan bytes: the Arrow scan a work-unit feed's table plans as.

A feed is registered as an Arrow IPC table over one empty file whose name carries the feed's
id and the tasks it asks for (`feed_file_name`), in a folder named after the feed's table. DataFusion plans filters, projections and
limits over that scan as over any file; the planner recognises it by the file's name
(`feed_scan_ref`), and a task replaces its files with those it wrote from the units it read.
The empty file is what a plan run without the feed reads: no rows, never a wrong schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .scan import file_groups, scan_kind
from .wire import WireError

FEED_FILE_PREFIX = "datafusion-distributed-feed-"
_FEED_FILE = re.compile(re.escape(FEED_FILE_PREFIX) + r"([0-9a-f]{32})-tasks-(\d{1,6})\.arrow$")


@dataclass(frozen=True)
class FeedScanRef:
    """The feed a scan reads: its id, the tasks it asks for (0: as many as the planner's
    task-count handlers choose), and its name (for display)."""

    feed_id: str
    tasks: int
    name: str = ""


def feed_file_name(feed_id: str, tasks: int) -> str:
    """The name of the empty Arrow file a feed's table is registered over."""
    if not re.fullmatch(r"[0-9a-f]{32}", feed_id):
        raise ValueError(f"a feed id is 32 lowercase hex digits, got {feed_id!r}")
    return f"{FEED_FILE_PREFIX}{feed_id}-tasks-{tasks}.arrow"


def feed_scan_ref(node: bytes) -> FeedScanRef | None:
    """The feed `node` scans, or None when it is another node (or bytes we cannot read)."""
    if scan_kind(node) != "arrow":
        return None
    try:
        files = [f for group in file_groups(node) for f in group]
    except WireError:
        return None
    if len(files) != 1:
        return None
    match = _FEED_FILE.search(files[0].path)
    if match is None:
        return None
    folder = files[0].path[: match.start()].rstrip("/")
    return FeedScanRef(match.group(1), int(match.group(2)), folder.rsplit("/", 1)[-1])
