"""The errors a user of the library may catch, in one module below every other room, so any
layer can raise them and none imports upward to do so."""

from __future__ import annotations

from typing import Protocol

from .common.errors import is_datafusion_panic, readable_message


class QueryCancelled(RuntimeError):
    """A query stopped because it was cancelled (`DistributedDataFrame.cancel()`)."""


class QueryTimedOut(QueryCancelled, TimeoutError):
    """A query stopped because it ran longer than `DistributedConfig.query_timeout`."""


class _FeedError(Protocol):
    """What FeedFailed reads of a work-unit feed's own error (`work_unit_feed.errors.FeedError`)."""

    feed: str
    source: str
    unit: str | None


class QueryFailed(RuntimeError):
    """A distributed query failed; the message names the stage, task and worker when a task
    failed, and keeps DataFusion's own message (the full text is the exception's cause)."""

    @classmethod
    def of(cls, exc: BaseException) -> QueryFailed:
        """`exc`, an error of DataFusion (or a panic inside it), as a QueryFailed."""
        return cls(readable_message(str(exc)) or type(exc).__name__)


class FeedFailed(QueryFailed):
    """A query failed because a work-unit feed it reads failed: its provider raised
    (`source` "provider"), or its reader raised on the unit `unit` (`source` "reader"; the
    unit shown by its repr). `feed` is the feed's table name; the message says all three."""

    def __init__(self, message: str, feed: str, source: str, unit: str | None) -> None:
        super().__init__(message)
        self.feed = feed
        self.source = source
        self.unit = unit

    @classmethod
    def of_feed(cls, error: _FeedError) -> FeedFailed:
        """The query failure a feed's error causes."""
        return cls(str(error), error.feed, error.source, error.unit)


class InvalidSetting(QueryFailed, ValueError):
    """A statement of the `distributed` settings namespace was refused: an unknown name, a
    setting fixed when the context was made, or a value the setting does not take (the message
    names the setting). A ValueError too, as a bad `DistributedConfig` raises."""


class ExtensionError(ValueError):
    """A user extension (see `DistributedContext`'s `extensions`) could not be loaded or
    installed: the message names it and says why."""


class ContextClosed(QueryFailed):
    """A query was started on a DistributedContext after its `close()`: its connections (and
    its embedded cluster) are gone, so a new context is needed."""

    def __init__(self) -> None:
        super().__init__("the DistributedContext is closed: make a new one to run queries")


class ResultStreamLost(QueryFailed):
    """A worker was lost while the result was streamed (`execute_stream`), after `delivered`
    batches had been handed out: they cannot be taken back, so the query must be run again.
    A loss before the first batch, or while `collect()` and what builds on it gather the whole
    result, is recovered instead."""

    def __init__(self, worker: str, delivered: int) -> None:
        batches = "batch" if delivered == 1 else "batches"
        super().__init__(
            f"the result stream lost worker {worker} after {delivered} {batches} had been delivered; "
            "rows already returned cannot be taken back: run the query again"
        )
        self.worker = worker
        self.delivered = delivered


def said_all(exc: BaseException) -> bool:
    """Whether `exc`'s message says all a user needs: an error DataFusion raised (a plain
    Exception or ValueError, or a panic), or a worker relayed, or one of this library's query
    failures. Raised on as QueryFailed without it chained, so that a mistyped column shows
    DataFusion's message, not the library's frames; anything else (a bug) keeps its chain."""
    return (
        type(exc) in (Exception, ValueError)
        or isinstance(exc, (QueryFailed, WorkerError))
        or is_datafusion_panic(exc)
    )


def as_query_failure(exc: BaseException) -> BaseException:
    """What a query that stopped with `exc` raises: QueryFailed for an error of the query
    (DataFusion's, raised in this process, or a panic inside it); cancellations and Python's own
    control flow (KeyboardInterrupt, ...) as they are."""
    if isinstance(exc, (QueryFailed, QueryCancelled)):
        return exc
    if isinstance(exc, Exception) or is_datafusion_panic(exc):
        return QueryFailed.of(exc)
    return exc


class WorkerUnreachable(ConnectionError):
    """A worker did not answer (down, wrong address, or timed out)."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"worker {url} is unreachable: {detail}")
        self.url = url


class WorkerTimeout(TimeoutError):
    """A call to a worker took longer than its deadline (the worker may still be alive)."""

    def __init__(self, url: str, seconds: float) -> None:
        super().__init__(f"worker {url} did not answer within {seconds:g}s")
        self.url = url


class WorkerError(RuntimeError):
    """A worker answered with an error (a task failed, or it refused a message).

    `lost_worker` names another worker the task could not reach (to fetch an input), when that
    is why it failed: the worker says so in the error's extra info, not in its text."""

    def __init__(self, url: str, detail: str, lost_worker: str | None = None) -> None:
        super().__init__(f"worker {url}: {detail}")
        self.url = url
        self.detail = detail
        self.lost_worker = lost_worker


class WorkerDraining(WorkerError):
    """A worker refused a task because it is draining (it was asked to leave, by SIGTERM or the
    `drain` action): the task runs on another worker. Neither a failure of the query nor a lost
    worker: the outputs it holds stay readable until its queries release them."""


class WorkersUnavailable(QueryFailed, ConnectionError):
    """Workers given by URL did not answer the health call made before the context's first
    query: `failures` maps each such URL to what went wrong and what to do."""

    def __init__(self, failures: dict[str, str], total: int) -> None:
        lines = "".join(f"\n  {url}: {why}" for url, why in failures.items())
        super().__init__(
            f"{len(failures)} of {total} worker(s) given did not answer before the first query:{lines}"
            "\nFix the URLs (or start the workers), or pass DistributedConfig(check_workers='warn') "
            "to start without them"
        )
        self.failures = failures


class WorkersNotFound(LookupError):
    """A resolver found no worker: its DNS name did not resolve, or resolved to no address."""


# What a call to a worker raises when the worker failed the call, not this process.
WORKER_ERRORS = (WorkerError, WorkerUnreachable, WorkerTimeout)
