"""Which worker's loss caused an error: one walk of an exception's causes, used by the
coordinator (to retry elsewhere) and by a worker (to tell the coordinator whom it lost)."""

from __future__ import annotations

from datafusion_distributed.errors import WorkerError, WorkerUnreachable
from datafusion_distributed.protocol.flight import lost_worker

GONE = "grpc://127.0.0.1:1"


def raised(outer: type[Exception], inner: BaseException, *, explicit: bool = True) -> BaseException:
    """`outer` raised from `inner` (explicit) or while handling it."""
    try:
        try:
            raise inner
        except BaseException:
            if explicit:
                raise outer("outer") from inner
            raise outer("outer")  # noqa: B904 - the implicit context is what is tested
    except BaseException as exc:
        return exc


def test_the_unreachable_worker_itself():
    assert lost_worker(WorkerUnreachable(GONE, "refused")) == GONE


def test_a_worker_that_lost_another_says_whom():
    assert lost_worker(WorkerError("grpc://127.0.0.1:2", "fetch failed", lost_worker=GONE)) == GONE


def test_an_ordinary_error_names_nobody():
    assert lost_worker(WorkerError("grpc://127.0.0.1:2", "division by zero")) is None
    assert lost_worker(ValueError("boom")) is None
    assert lost_worker(None) is None


def test_found_through_causes_and_contexts():
    assert lost_worker(raised(RuntimeError, WorkerUnreachable(GONE, "reset"))) == GONE
    assert lost_worker(raised(RuntimeError, WorkerUnreachable(GONE, "reset"), explicit=False)) == GONE


def test_a_suppressed_context_is_not_followed():
    try:
        try:
            raise WorkerUnreachable(GONE, "reset")
        except WorkerUnreachable:
            raise RuntimeError("unrelated") from None
    except RuntimeError as exc:
        assert lost_worker(exc) is None
