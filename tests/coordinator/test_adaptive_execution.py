"""Adaptive execution: stages re-planned from what their producers really wrote.

The data is shaped for it: a fact table whose join key holds 40% of its rows in one value, and
a dimension, both as several Parquet files, so that a join of the two is shuffled and one
partition of the fact side is far larger than the others. Every answer is compared with
single-node DataFusion's on the same data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.events import (
    Adaptation,
    AdaptiveDecision,
    DistributedHandler,
    Event,
    EventKind,
)
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import FORCED_CONFIG

HOT_KEY = 7
# shuffle both sides of every join, and call a partition skewed from 2x the median and 1 byte;
# four workers, so that sharing the hot partition out leaves the busiest worker less to do (on
# two, the other partitions fill the second worker: sharing would only add the rebuilt side)
# re-planning needs the sizes of spooled exchanges: streamed stages keep their first cut
SKEW = dataclasses.replace(
    FORCED_CONFIG, skew_factor=2.0, skew_min_bytes=1, embedded_workers=4, exchange="spool"
)


@pytest.fixture(scope="module")
def skewed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fact(k, v): 40% of its 20000 rows have k = HOT_KEY; dim(k, name): keys 0..999 but 500..599
    (so outer and anti joins have rows on both sides without a match); 4 files each."""
    folder = tmp_path_factory.mktemp("skewed")
    rng = np.random.default_rng(7)
    rows = 20_000
    keys = np.where(rng.random(rows) < 0.4, HOT_KEY, rng.integers(0, 1200, rows))
    fact = pa.table({"k": keys.astype("int64"), "v": rng.integers(0, 100, rows).astype("int64")})
    dim_keys = np.array([k for k in range(1000) if not 500 <= k < 600], dtype="int64")
    dim = pa.table({"k": dim_keys, "name": [f"n{k % 37}" for k in dim_keys]})
    for name, table in (("fact", fact), ("dim", dim)):
        (folder / name).mkdir()
        step = -(-table.num_rows // 4)
        for part in range(4):
            pq.write_table(table.slice(part * step, step), folder / name / f"{part}.parquet")
    return folder


def _context(folder: Path) -> SessionContext:
    ctx = SessionContext()
    for name in ("fact", "dim"):
        ctx.register_parquet(name, str(folder / name))
    return ctx


class Decisions(DistributedHandler):
    """Keeps every adaptive decision the query's events carry."""

    def __init__(self) -> None:
        self.seen: list[AdaptiveDecision] = []

    def on_event(self, event: Event) -> None:
        if event.kind is EventKind.STAGE_ADAPTED:
            self.seen.append(event.metrics)


@pytest.fixture(scope="module")
def dctx(skewed: Path) -> Iterator[tuple[DistributedContext, Decisions]]:
    decisions = Decisions()
    with DistributedContext(_context(skewed), config=SKEW, handlers=[decisions]) as dctx:
        yield dctx, decisions


JOINS = {
    "inner": ("SELECT f.k, d.name, f.v FROM fact f JOIN dim d ON f.k = d.k", {0, 1}),
    "left": ("SELECT f.k, d.name, f.v FROM fact f LEFT JOIN dim d ON f.k = d.k", {0, 1}),
    "right": ("SELECT d.k, d.name, f.v FROM fact f RIGHT JOIN dim d ON f.k = d.k", {0, 1}),
    "full": ("SELECT f.k, d.k AS dk, f.v FROM fact f FULL JOIN dim d ON f.k = d.k", set()),
    "semi": ("SELECT f.k, f.v FROM fact f WHERE f.k IN (SELECT k FROM dim)", {0, 1}),
    "anti": ("SELECT f.k, f.v FROM fact f WHERE f.k NOT IN (SELECT k FROM dim)", None),
    "anti_exists": (
        "SELECT f.k, f.v FROM fact f WHERE NOT EXISTS (SELECT 1 FROM dim d WHERE d.k = f.k)",
        {0, 1},
    ),
    "dim_semi": ("SELECT d.k, d.name FROM dim d WHERE EXISTS (SELECT 1 FROM fact f WHERE f.k = d.k)", {0, 1}),
    "partial_aggregate_above": (
        "SELECT d.name, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON f.k = d.k GROUP BY d.name",
        {0, 1},
    ),
    "final_aggregate_on_the_key": (
        "SELECT f.k, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON f.k = d.k GROUP BY f.k",
        None,
    ),
}


@pytest.mark.parametrize("name", JOINS)
def test_skewed_joins_give_single_node_answers(name: str, skewed: Path, dctx) -> None:
    distributed, decisions = dctx
    sql, _ = JOINS[name]
    decisions.seen.clear()
    df = distributed.sql(sql)
    actual = df.to_arrow_table()
    assert_tables_equal(actual, _context(skewed).sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)


def _plan_of_join(dctx: DistributedContext, sql: str):
    plan = dctx.sql(sql).distributed_plan()
    joins = [s for s in plan.stages if any(n.name == "HashJoinExec" for n in s.root.walk())]
    return joins


@pytest.mark.parametrize("name", ["inner", "full", "final_aggregate_on_the_key", "partial_aggregate_above"])
def test_the_hot_partition_is_split_only_where_the_plan_allows(name: str, dctx) -> None:
    distributed, decisions = dctx
    sql, _ = JOINS[name]
    (join_stage,) = [s for s in _plan_of_join(distributed, sql) if len(s.inputs) == 2]
    allowed = name in ("inner", "partial_aggregate_above")
    assert bool(join_stage.skew_inputs) is allowed, join_stage.skew_inputs
    decisions.seen.clear()
    distributed.sql(sql).to_arrow_table()
    splits = [d for d in decisions.seen if d.stage == join_stage.id and d.split]
    assert bool(splits) is allowed, decisions.seen


def test_each_join_type_splits_only_the_side_whose_rows_it_emits_alone(dctx) -> None:
    distributed, _ = dctx
    found = {}
    for name in ("inner", "left", "right", "full"):
        (stage,) = [s for s in _plan_of_join(distributed, JOINS[name][0]) if len(s.inputs) == 2]
        join = next(n for n in stage.root.walk() if n.name == "HashJoinExec")
        found[join.attribute("join_type")] = set(stage.skew_inputs)
    # the inputs are in the join's child order: 0 its left (build) side, 1 its right
    for join_type, sides in found.items():
        expected = {"Inner": {0, 1}, "Left": {0}, "Right": {1}, "Full": set()}[join_type]
        if join_type in ("Left", "Right"):
            assert sides <= expected and sides, (join_type, sides)
        else:
            assert sides == expected, (join_type, sides)


def test_small_inputs_are_coalesced_and_the_last_step_runs_in_the_coordinator(skewed: Path) -> None:
    sql = "SELECT d.name, count(*) AS n FROM fact f JOIN dim d ON f.k = d.k GROUP BY d.name ORDER BY d.name"
    decisions = Decisions()
    config = dataclasses.replace(SKEW, adaptive_one_task_bytes=8 << 20, skew_min_bytes=1 << 40)
    with DistributedContext(_context(skewed), config=config, handlers=[decisions]) as dctx:
        df = dctx.sql(sql)
        planned = df.distributed_plan()
        actual = df.to_arrow_table()
        text = df.explain_string(analyze=True)
        first_cut = df.explain_string()
    assert_tables_equal(actual, _context(skewed).sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)
    folded = [d for d in decisions.seen if d.folded_into is not None]
    assert folded and all(d.folded_into == planned.final.id for d in folded)
    assert any(d.tasks == 1 and d.planned_tasks > 1 for d in decisions.seen if d.folded_into is None)
    for d in decisions.seen:
        assert d.describe() in text
    assert f"adaptive: stage {folded[0].stage} runs inside stage {planned.final.id}" in text
    assert "adaptive:" not in first_cut  # explain() shows the plan as first cut


def test_set_distributed_adaptive_false_runs_the_plan_as_cut(skewed: Path) -> None:
    decisions = Decisions()
    with DistributedContext(_context(skewed), config=SKEW, handlers=[decisions]) as dctx:
        dctx.sql("SET distributed.adaptive = false")
        sql = JOINS["inner"][0]
        as_cut = dctx.sql(sql)
        actual = as_cut.to_arrow_table()
        assert decisions.seen == []
        dctx.sql("SET distributed.adaptive = true")
        dctx.sql(sql).to_arrow_table()
        assert decisions.seen
    assert_tables_equal(actual, _context(skewed).sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(as_cut)


class KeepAsPlanned(DistributedHandler):
    """Answers every stage with its planned tasks and no split: nothing changes."""

    def adapt_stage(self, request):
        return Adaptation(tasks=request.stage.task_count)


class FoldEverything(DistributedHandler):
    def adapt_stage(self, request):
        return Adaptation(tasks=1, fold=True)


def test_a_handler_overrides_the_decisions(skewed: Path) -> None:
    decisions = Decisions()
    handlers = [KeepAsPlanned(), decisions]
    with DistributedContext(_context(skewed), config=SKEW, handlers=handlers) as dctx:
        dctx.sql(JOINS["inner"][0]).to_arrow_table()
    assert decisions.seen == []


def test_a_handler_asking_for_what_a_stage_cannot_do_fails_the_query_naming_it(skewed: Path) -> None:
    with DistributedContext(_context(skewed), config=SKEW, handlers=[FoldEverything()]) as dctx:
        with pytest.raises(Exception, match="FoldEverything.adapt_stage folded stage"):
            dctx.sql(JOINS["inner"][0]).to_arrow_table()


# every join shuffled as planned, no partition skewed: a join switched to collecting its build
# side is switched by `Budget` (the broadcast budget is 0 here)
SMALL_BUILD = dataclasses.replace(
    FORCED_CONFIG, adaptive_task_bytes=DistributedConfig().adaptive_task_bytes, skew_min_bytes=1 << 40
)
BROADCAST_JOINS = {
    "inner": ("SELECT f.k, d.name, f.v FROM fact f JOIN dim d ON f.k = d.k", True),
    "right": ("SELECT d.k, d.name, f.v FROM dim d RIGHT JOIN fact f ON f.k = d.k", True),
    "semi": ("SELECT f.k, f.v FROM fact f WHERE f.k IN (SELECT k FROM dim)", True),
    "anti": ("SELECT f.k, f.v FROM fact f WHERE NOT EXISTS (SELECT 1 FROM dim d WHERE d.k = f.k)", True),
    "aggregate_above": (
        "SELECT d.name, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON f.k = d.k GROUP BY d.name",
        True,
    ),
    "left_keeps_its_shuffle": ("SELECT d.k, d.name, f.v FROM dim d LEFT JOIN fact f ON f.k = d.k", False),
    "full_keeps_its_shuffle": ("SELECT f.k, d.k AS dk FROM fact f FULL JOIN dim d ON f.k = d.k", False),
}


class Budget(DistributedHandler):
    """Switches a join to collecting its build side when that side holds at most 64 KiB."""

    def adapt_stage(self, request):
        if request.build_size is not None and request.build_size[1] <= 64 * 1024:
            return Adaptation(tasks=request.stage.task_count, broadcast=True)
        return None


@pytest.mark.parametrize("name", BROADCAST_JOINS)
def test_a_join_whose_build_side_turns_out_small_collects_it_instead_of_shuffling(
    name: str, skewed: Path
) -> None:
    sql, switched = BROADCAST_JOINS[name]
    decisions = Decisions()
    handlers = [Budget(), decisions]
    ctx = _context(skewed)
    ctx.sql("CREATE VIEW few AS SELECT * FROM dim WHERE k < 20")  # 20 rows
    sql = sql.replace("dim", "few")
    with DistributedContext(ctx, config=SMALL_BUILD, handlers=handlers) as dctx:
        df = dctx.sql(sql)
        assert any(s.broadcast for s in df.distributed_plan().stages) is switched
        actual = df.to_arrow_table()
        text = df.explain_string(analyze=True)
    assert_tables_equal(actual, ctx.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)
    broadcasts = [d for d in decisions.seen if d.broadcast is not None]
    assert bool(broadcasts) is switched
    if switched:
        assert "HashJoinExec: mode=CollectLeft" in text and "CoalescePartitionsExec" in text
        assert f"adaptive: stage {broadcasts[0].stage} runs inside stage {broadcasts[0].folded_into}" in text


def test_a_build_side_over_the_budget_stays_shuffled(skewed: Path) -> None:
    decisions = Decisions()
    sql = BROADCAST_JOINS["inner"][0]
    with DistributedContext(
        _context(skewed), config=SMALL_BUILD, handlers=[decisions]
    ) as dctx:  # the default budget is 0 bytes here: nothing is broadcast
        df = dctx.sql(sql)
        actual = df.to_arrow_table()
    assert [d for d in decisions.seen if d.broadcast] == []
    assert_tables_equal(actual, _context(skewed).sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(df)
