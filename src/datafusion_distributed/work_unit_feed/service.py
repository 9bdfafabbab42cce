"""A context's feeds: their tables' files, their units per running query, and the feed
service workers ask for units (started with the first query that reads a feed)."""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from ..codec.feed_scan import feed_file_name, feed_folder_name
from ..common import exits
from ..execution_plans.stage import FeedScan
from .dispatch import FeedRun
from .feed import WorkUnitFeed
from .server import FeedServer

# Files of a feed's table: DataFusion plans its scan with at most this many partitions (and
# at most `target_partitions`, the cluster's partitions).
TABLE_FILES = 64


class FeedService:
    """The feeds registered on one DistributedContext.

    Args:
        host: where the feed service listens (workers must reach it there).
        middleware: makes the feed server's middleware (the cluster's token check).
    """

    def __init__(
        self, host: str = "127.0.0.1", middleware: Callable[[], dict[str, Any] | None] | None = None
    ) -> None:
        self.host = host
        self._middleware = middleware or (lambda: None)
        self._feeds: dict[str, WorkUnitFeed] = {}
        self._folder: str | None = None
        self._exit_key: int | None = None
        self._server: FeedServer | None = None
        self._lock = threading.Lock()

    def add(self, feed: WorkUnitFeed) -> str:
        """Keep `feed`; returns the folder of empty Arrow files its table is registered over
        (its name tells the planner which feed a scan reads; DataFusion plans the scan with
        as many partitions as it would give that many files)."""
        with self._lock:
            if self._folder is None:
                self._folder = tempfile.mkdtemp(prefix="datafusion-distributed-feeds-")
                remove = functools.partial(shutil.rmtree, self._folder, ignore_errors=True)
                atexit.register(remove)
                self._exit_key = exits.at_exit_signal(remove)  # SIGTERM skips atexit
            self._feeds[feed.id] = feed
            table = re.sub(r"[^A-Za-z0-9_.-]", "_", feed.name)[:64] or "feed"  # explain() shows it
            folder = os.path.join(
                self._folder, table, feed_folder_name(feed.id, feed.tasks or 0, bool(feed.native))
            )
        os.makedirs(folder)
        for index in range(TABLE_FILES):
            with pa.ipc.new_file(os.path.join(folder, feed_file_name(index)), feed.schema):
                pass  # no batch: a plan run without the feed reads no row, in the feed's schema
        return folder + os.sep

    def feed(self, feed_id: str) -> WorkUnitFeed | None:
        """The feed with id `feed_id`, if it was registered here."""
        with self._lock:
            return self._feeds.get(feed_id)

    @property
    def url(self) -> str:
        """The feed service's URL, starting it on first use."""
        with self._lock:
            if self._server is None:
                self._server = FeedServer(self.host, self._middleware())
            return self._server.url

    def start(self, query_id: str, scans: Sequence[FeedScan], serve: bool) -> FeedRun:
        """The units of query `query_id`'s feed scans, served to workers when `serve`.

        Raises:
            LookupError: a scan reads a feed this context does not know (registered on another
                DistributedContext).
        """
        feeds = {}
        for scan in scans:
            feed = self.feed(scan.feed_id)
            if feed is None:
                raise LookupError(
                    f"the query reads the feed table {scan.name!r} registered by another DistributedContext; "
                    "register the feed on this one"
                )
            feeds[scan.feed_id] = feed
        run = FeedRun(query_id, feeds, scans)
        if serve:
            self.url  # noqa: B018 - started before the first task asks
            assert self._server is not None  # `url` starts it
            self._server.add(run)
        return run

    def finish(self, run: FeedRun) -> None:
        """End a query's run: stop its providers and serve it no more."""
        run.close()
        with self._lock:
            server = self._server
        if server is not None:
            server.remove(run.query_id)

    def close(self) -> None:
        """Stop the feed service and delete the feeds' table files."""
        with self._lock:
            server, self._server = self._server, None
            folder, self._folder = self._folder, None
            exit_key, self._exit_key = self._exit_key, None
        if server is not None:
            server.close()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if exit_key is not None:
            exits.forget(exit_key)
