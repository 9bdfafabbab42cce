"""Hold a probe stage's failure until its join's build side is known (see
`distributed_planner.empty_build`): DataFusion never runs the probe side of a join whose build
side is empty, so neither its error nor its work may decide the query then."""

from __future__ import annotations

import logging

from ..distributed_planner.empty_build import ProbeSkip, probe_skips
from ..execution_plans.stage import DistributedPlan
from ..protocol.messages import TaskResult

log = logging.getLogger("datafusion_distributed.coordinator")

Results = dict[int, list[TaskResult]]

# what a stage DataFusion would not have run stands for: no row, no file
NOT_RUN = TaskResult(partitions=(), schema=None, seconds=0.0, fetched_bytes=0)


class ProbeHolds:
    """The failures of probe stages held for one query run, and what settles them."""

    def __init__(self) -> None:
        self.held: dict[int, BaseException] = {}
        self._plan: DistributedPlan | None = None
        self._skips: tuple[ProbeSkip, ...] = ()

    def may_hold(self, plan: DistributedPlan, stage_id: int, results: Results) -> bool:
        """Whether a failure of stage `stage_id` is not the query's, or not yet known to be:
        the stage only feeds a join's probe side, whose build side is not written yet or
        was written empty."""
        return any(
            stage_id in skip.probe and _build_rows(skip, results) in (None, 0)
            for skip in self._skips_of(plan)
        )

    def hold(self, stage_id: int, failure: BaseException) -> None:
        """Keep the first failure of stage `stage_id` until its join's build side is known."""
        self.held.setdefault(stage_id, failure)

    def settle(self, plan: DistributedPlan, results: Results) -> set[int]:
        """The probe stages not to run (their join's build side was written empty), or raise
        the held failure of one whose build side holds rows."""
        skipped: set[int] = set()
        for skip in self._skips_of(plan):
            rows = _build_rows(skip, results)
            if rows is None:
                continue
            for stage_id in skip.probe:
                if stage_id in results and stage_id not in self.held:
                    continue
                if rows == 0:
                    skipped.add(stage_id)
                elif stage_id in self.held:
                    raise self.held[stage_id]
        for stage_id in skipped:
            if self.held.pop(stage_id, None) is not None:
                log.info(
                    "stage %d failed, but its join's build side is empty: DataFusion would not run it",
                    stage_id,
                )
        return skipped

    def _skips_of(self, plan: DistributedPlan) -> tuple[ProbeSkip, ...]:
        if plan is not self._plan:  # re-planned (adaptive): its stages may have changed
            self._plan, self._skips = plan, probe_skips(plan)
        return self._skips


def _build_rows(skip: ProbeSkip, results: Results) -> int | None:
    """The rows written for the join's build side; None until all of it is written."""
    if not all(b in results for b in skip.build):
        return None
    return sum(p.rows for b in skip.build for r in results[b] for p in r.partitions)
