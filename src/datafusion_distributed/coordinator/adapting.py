"""Adaptive execution as a run goes: each stage re-planned once, as it starts, from the exact
sizes its producers wrote (see `distributed_planner.adaptive`), and probe stages held while
the build side that decides whether they run inside their join is written."""

from __future__ import annotations

import logging

from ..distributed_planner.adaptive import adapt, adapt_request, build_side_of
from ..events.chain import HandlerChain
from ..execution_plans.stage import Stage
from .run_state import RunState

log = logging.getLogger("datafusion_distributed.coordinator")


class StageAdapter:
    """Re-plans the stages of one run (see the module docstring)."""

    def __init__(self, state: RunState, handlers: HandlerChain) -> None:
        self.state = state
        self.handlers = handlers
        self._adapted: set[int] = set()  # stages re-planned from their inputs' sizes (once each)

    def adapted(self, stage: Stage) -> Stage | None:
        """`stage`, whose producers are complete, as it runs: re-planned from the sizes they
        wrote when the query is adaptive (once; see `distributed_planner.adaptive`), or None
        when it runs inside another stage instead."""
        config = self.state.config
        if not config.adaptive or stage.id in self._adapted or stage.id in self.state.streams.pinned:
            return stage
        self._adapted.add(stage.id)
        request = adapt_request(self.state.plan, stage, self.state.results, config)
        if request is None:
            return stage
        adaptation, handler = self.handlers.adapt_stage(request)
        if adaptation is None:
            return stage
        by = type(handler).__name__ if handler in self.handlers.user else ""
        plan, record = adapt(self.state.plan, request, adaptation, self.state.results, by)
        if record is None:
            return stage
        log.info("stage %d adapted: %s", stage.id, record.describe())
        self.state.plan = plan
        self.state.events.stage_adapted(record, plan)
        return None if record.folded_into is not None else plan.stage(stage.id)

    def held(self, stage: Stage) -> bool:
        """Whether `stage` waits for the build side of the join that reads its output to be
        written, when the query is adaptive: if that side is small, the join collects it whole
        and `stage` runs inside the join's stage instead of shuffling (see `adapted`). Only a
        build side with a task for every worker holds it: one of fewer tasks would leave
        workers idle meanwhile, which costs more than the shuffle saved (measured in
        benchmarks/README.md)."""
        if not self.state.config.adaptive or stage.id in self.state.streams.pinned:
            return False
        build = build_side_of(self.state.plan, stage)
        if build is None or build in self.state.results:
            return False
        return self.state.plan.stage(build).task_count >= len(self.state.workers)
