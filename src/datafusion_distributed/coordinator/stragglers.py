"""When a running task is a straggler, worth a second attempt elsewhere (speculative execution).

A task is a straggler when it has run longer than `factor` times the median time of its stage's
finished tasks, at least `min_seconds`, and once at least `QUANTILE` of the stage's tasks have
finished: before that the median says little, and a stage whose tasks are all equally slow
never has one that stands out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

QUANTILE = 0.5  # the share of a stage's tasks that must have finished before any is a straggler


@dataclass(frozen=True)
class StragglerRule:
    """The settings `speculation_factor` and `speculation_min_seconds` of a run that speculates."""

    factor: float = 2.0
    min_seconds: float = 1.0

    def is_straggler(self, elapsed: float, finished: Sequence[float], tasks: int) -> bool:
        """Whether a task running for `elapsed` seconds is a straggler, when `finished` holds the
        times of its stage's finished tasks, out of `tasks` in all."""
        if tasks < 2 or not finished or len(finished) < math.ceil(tasks * QUANTILE):
            return False
        return elapsed >= self.min_seconds and elapsed > self.factor * statistics.median(finished)
