"""The error every failed distributed query raises."""

from __future__ import annotations

from ..common.errors import is_datafusion_panic, readable_message
from .cancellation import QueryCancelled


class QueryFailed(RuntimeError):
    """A distributed query failed; the message names the stage, task and worker when a task
    failed, and keeps DataFusion's own message (the full text is the exception's cause)."""

    @classmethod
    def of(cls, exc: BaseException) -> QueryFailed:
        """`exc`, an error of DataFusion (or a panic inside it), as a QueryFailed."""
        return cls(readable_message(str(exc)) or type(exc).__name__)


def as_query_failure(exc: BaseException) -> BaseException:
    """What a query that stopped with `exc` raises: QueryFailed for an error of the query
    (DataFusion's, raised in this process, or a panic inside it); cancellations and Python's own
    control flow (KeyboardInterrupt, ...) as they are."""
    if isinstance(exc, (QueryFailed, QueryCancelled)):
        return exc
    if isinstance(exc, Exception) or is_datafusion_panic(exc):
        return QueryFailed.of(exc)
    return exc
