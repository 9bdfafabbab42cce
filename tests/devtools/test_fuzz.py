"""The differential SQL generator: deterministic, shrinking, classifying, and a bounded run
that finds no difference between single-node DataFusion and the library.

`make fuzz` runs a long one (see devtools/fuzz).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from datafusion_distributed.test_utils.distribution import assert_share_ran_distributed
from devtools.fuzz.differ import (
    BOTH_FAIL,
    DISTRIBUTED_ONLY_ERROR,
    EQUAL,
    SETUPS,
    SINGLE_ONLY_ERROR,
    VARIES,
    WRONG,
    Answer,
    Outcome,
    classify,
)
from devtools.fuzz.generator import QueryGenerator
from devtools.fuzz.run import run, shrink


def test_a_seed_makes_the_same_query_and_seeds_differ():
    assert QueryGenerator(5).query().sql() == QueryGenerator(5).query().sql()
    assert len({QueryGenerator(seed).query().sql() for seed in range(50)}) > 45


def test_queries_cover_the_constructs_it_is_meant_to():
    text = " ".join(QueryGenerator(seed).query().sql() for seed in range(400))
    for construct in (
        "LEFT ANTI JOIN", "RIGHT SEMI JOIN", "FULL JOIN", "CROSS JOIN", "GROUP BY", "HAVING",
        " OVER (", "EXISTS (", "NOT IN (SELECT", "UNION ALL", "INTERSECT", "EXCEPT", "LIMIT",
        "DISTINCT", "FILTER (WHERE", "string_agg(", "array_agg(", " m ", " e ",
    ):  # fmt: skip
        assert construct in text, construct


class _FailsOnAntiJoins:
    """Stands for a Differ: a query 'differs' when it has a LEFT ANTI JOIN."""

    def __init__(self):
        self.runs = 0

    def run(self, sql: str, profile: str, setup) -> Outcome:
        self.runs += 1
        return Outcome(WRONG if "LEFT ANTI JOIN" in sql else EQUAL)


def test_a_difference_is_shrunk_to_what_it_needs():
    query = next(
        q
        for seed in range(10_000)
        if "LEFT ANTI JOIN" in (q := QueryGenerator(seed).query()).sql() and not q.set_op and len(q.where) > 0
    )
    differ = _FailsOnAntiJoins()
    small, profile = shrink(differ, query, "small batches", SETUPS["embedded"], WRONG)
    assert "LEFT ANTI JOIN" in small.sql()
    assert profile == "default"  # it fails without the profile too
    assert small.where == () and small.limit is None and len(small.sql()) < len(query.sql())


def _answer(values) -> Answer:
    return Answer(table=pa.table({"x": values}))


ERROR = Answer(error="Divide by zero")


@pytest.mark.parametrize(
    ("distributed", "reference", "variants", "kind"),
    [
        (_answer([1, 2]), _answer([2, 1]), [], EQUAL),
        (ERROR, ERROR, [], BOTH_FAIL),
        (_answer([1]), _answer([2]), [_answer([2])], WRONG),
        (ERROR, _answer([2]), [_answer([2])], DISTRIBUTED_ONLY_ERROR),
        (_answer([2]), ERROR, [ERROR], SINGLE_ONLY_ERROR),
        (_answer([1]), _answer([2]), [_answer([2]), _answer([1])], VARIES),  # single-node gave 1 once
        (_answer([1]), _answer([2]), [_answer([3])], VARIES),  # single-node is not stable
    ],
)
@pytest.mark.not_a_distributed_run  # the differ's own tests, on given answers
def test_outcomes(distributed, reference, variants, kind):
    assert classify("SELECT x FROM t", distributed, reference, lambda: iter(variants)) == kind


@pytest.mark.not_a_distributed_run  # the differ's own tests, on given answers
def test_variants_are_run_only_when_the_answers_differ():
    def never():
        raise AssertionError("variants were run")

    assert classify("SELECT 1", _answer([1]), _answer([1]), never) == EQUAL


def _assert_no_difference(report) -> None:
    assert report.bad == 0, report.summary()
    assert_share_ran_distributed(report.distributed, report.queries)
    assert report.one_node_share <= 0.02, report.summary()


def test_generated_queries_answer_as_on_one_node_on_the_embedded_cluster():
    _assert_no_difference(
        run(seed=20261207, count=300, setups=[SETUPS["embedded"], SETUPS["embedded-shipped"]])
    )


def test_generated_queries_answer_as_on_one_node_on_workers_that_share_nothing():
    _assert_no_difference(
        run(seed=20261208, count=100, setups=[SETUPS["workers"], SETUPS["workers-shipped"]], workers=3)
    )
