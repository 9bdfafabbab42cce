"""The straggler rule of speculative execution, as a pure function of a stage's task times."""

from __future__ import annotations

import pytest

from datafusion_distributed.coordinator.stragglers import StragglerRule

RULE = StragglerRule(factor=2.0, min_seconds=1.0)


def test_a_task_far_slower_than_its_finished_peers_is_a_straggler():
    assert RULE.is_straggler(elapsed=5.0, finished=[1.0, 1.2], tasks=3)


def test_not_before_half_the_stage_finished():
    assert not RULE.is_straggler(elapsed=50.0, finished=[1.0], tasks=4)
    assert RULE.is_straggler(elapsed=50.0, finished=[1.0, 1.0], tasks=4)
    assert RULE.is_straggler(elapsed=50.0, finished=[1.0, 1.0], tasks=3)  # ceil(1.5) = 2


def test_not_within_factor_times_the_median():
    assert not RULE.is_straggler(elapsed=2.0, finished=[1.0, 1.0, 5.0], tasks=4)
    assert RULE.is_straggler(elapsed=2.1, finished=[1.0, 1.0, 5.0], tasks=4)


def test_never_before_min_seconds_however_fast_the_others():
    assert not RULE.is_straggler(elapsed=0.9, finished=[0.01, 0.01], tasks=3)
    assert RULE.is_straggler(elapsed=1.0, finished=[0.01, 0.01], tasks=3)


def test_equally_slow_tasks_are_not_stragglers():
    assert not RULE.is_straggler(elapsed=10.5, finished=[10.0, 10.2, 9.9], tasks=6)


@pytest.mark.parametrize("finished", [[], [0.1]])
def test_a_stage_of_one_task_or_none_finished_never_speculates(finished):
    assert not RULE.is_straggler(elapsed=100.0, finished=finished, tasks=1)
    assert not RULE.is_straggler(elapsed=100.0, finished=[], tasks=4)
