"""The handler chain: the one extension point for task counts, task routing, worker-side plan
rewrites and lifecycle notifications.

For a decision (`task_count`, `route_task`, `rewrite_plan`, `adapt_stage`) the chain asks the
user's handlers in order, then the built-in ones (`events.defaults`); the first answer that is
not None wins.
Notifications (`on_event`) go to every handler, in the same order; a handler that raises is
logged and skipped, so observing a query can never fail it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .defaults import DEFAULT_HANDLERS
from .handlers import (
    Adaptation,
    AdaptRequest,
    Event,
    PlanRewriteRequest,
    RoutingRequest,
    TaskCount,
    TaskCountRequest,
)

if TYPE_CHECKING:
    from datafusion.plan import ExecutionPlan

log = logging.getLogger("datafusion_distributed.events")


class HandlerChain:
    """User handlers followed by the built-in ones; first answer wins, every handler is told."""

    def __init__(self, handlers: Iterable[Any] = (), defaults: Iterable[Any] | None = None) -> None:
        self.user: tuple[Any, ...] = tuple(handlers)
        self.handlers: tuple[Any, ...] = self.user + tuple(DEFAULT_HANDLERS if defaults is None else defaults)

    @classmethod
    def of(cls, handlers: HandlerChain | Sequence[Any] | None) -> HandlerChain:
        """`handlers` as a chain: a chain as it is, else those handlers before the built-in ones."""
        if isinstance(handlers, HandlerChain):
            return handlers
        return cls(handlers or ())

    def with_handlers(self, extra: Iterable[Any]) -> HandlerChain:
        """This chain with `extra` user handlers after the existing user handlers."""
        return HandlerChain(self.user + tuple(extra), defaults=self.handlers[len(self.user) :])

    def first(
        self, method: str, request: Any, accept: Callable[[Any], bool] | None = None
    ) -> tuple[Any, Any]:
        """The first non-None answer of `handler.method(request)` (and its handler) that
        `accept(answer)` allows; (None, None) when nobody answers."""
        for handler in self.handlers:
            fn = getattr(handler, method, None)
            if fn is None:
                continue
            answer = fn(request)
            if answer is not None and (accept is None or accept(answer)):
                return answer, handler
        return None, None

    def task_count(self, request: TaskCountRequest) -> tuple[TaskCount, Any]:
        """The first handler's task count and that handler; raise TypeError on an answer that is not a TaskCount."""
        answer, handler = self.first("task_count", request)
        if not isinstance(answer, TaskCount):
            raise TypeError(f"task_count handlers must return TaskCount or None, got {answer!r}")
        return answer, handler

    def route_task(self, request: RoutingRequest) -> str:
        """The first answer that names a live worker; raise ValueError when no handler gives one."""
        answer, _ = self.first("route_task", request, accept=lambda url: url in request.workers)
        if answer is None:
            raise ValueError(f"no handler routed stage {request.stage.id} task {request.task}")
        return answer

    def adapt_stage(self, request: AdaptRequest) -> tuple[Adaptation | None, Any]:
        """The first handler's adaptation and that handler ((None, None) when none answers: the
        stage runs as planned); raise TypeError on an answer that is not an Adaptation,
        ValueError on one the stage cannot take."""
        answer, handler = self.first("adapt_stage", request)
        if answer is None:
            return None, None
        if not isinstance(answer, Adaptation):
            raise TypeError(f"adapt_stage handlers must return Adaptation or None, got {answer!r}")
        name = type(handler).__name__
        if answer.broadcast and request.build_size is None:
            raise ValueError(
                f"{name}.adapt_stage broadcast for stage {request.stage.id}, which no join probes"
            )
        if answer.fold and not request.can_fold:
            raise ValueError(f"{name}.adapt_stage folded stage {request.stage.id}, which cannot be folded")
        for partition, shares in answer.split:
            most = request.max_shares[partition] if 0 <= partition < len(request.max_shares) else 1
            if shares > most:
                raise ValueError(
                    f"{name}.adapt_stage split partition {partition} of stage {request.stage.id} over "
                    f"{shares} tasks; it can be shared out over {most} at most"
                )
        return answer, handler

    def rewrites_plans(self) -> bool:
        """Whether a handler of the chain may rewrite task plans (it defines `rewrite_plan`)."""
        from .handlers import DistributedHandler

        default = DistributedHandler.rewrite_plan
        return any(getattr(type(h), "rewrite_plan", default) is not default for h in self.handlers)

    def rewrite_plan(self, request: PlanRewriteRequest) -> ExecutionPlan:
        """The task's plan after the first handler that rewrites it (unchanged when none does)."""
        from datafusion.plan import ExecutionPlan

        answer, handler = self.first("rewrite_plan", request)
        if answer is None:
            return request.plan
        if isinstance(answer, (bytes, bytearray)):
            return ExecutionPlan.from_bytes(request.ctx, bytes(answer))
        if isinstance(answer, ExecutionPlan):
            return answer
        raise TypeError(f"{type(handler).__name__}.rewrite_plan returned {type(answer).__name__}")

    def notify(self, event: Event) -> None:
        """Tell every handler of `event`, logging (not raising) what a handler raises."""
        for handler in self.handlers:
            fn = getattr(handler, "on_event", None)
            if fn is None:
                continue
            try:
                fn(event)
            except Exception:  # an observer must never fail the query
                log.exception("%s.on_event(%s) failed", type(handler).__name__, event.kind.value)
