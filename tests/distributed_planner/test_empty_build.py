"""Which probe stages a hash join never needs when its build side is empty (the scheduler
drops them, and holds their failures until the build side is known)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext
from datafusion_distributed.distributed_planner.empty_build import probe_skips
from datafusion_distributed.test_utils.forced import forced_distribution


@pytest.fixture(scope="module")
def dctx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables")
    ctx = SessionContext()
    for name in ("a", "b"):
        (folder / name).mkdir()
        for i in range(2):
            pq.write_table(pa.table({"id": list(range(i * 10, i * 10 + 10))}), folder / name / f"{i}.parquet")
        ctx.register_parquet(name, str(folder / name))
    with DistributedContext(ctx, **forced_distribution()) as dctx:
        yield dctx


def _skips(dctx, sql):
    plan = dctx.sql(sql).distributed_plan()
    assert plan.is_distributed
    return plan, probe_skips(plan)


def _join_stage(plan):
    return next(s for s in plan.stages if any(n.name == "HashJoinExec" for n in s.root.walk()))


@pytest.mark.parametrize("join", ["JOIN", "LEFT JOIN", "LEFT SEMI JOIN", "LEFT ANTI JOIN", "RIGHT SEMI JOIN"])
def test_joins_that_emit_nothing_without_build_rows_skip_their_probe(dctx, join):
    plan, skips = _skips(dctx, f"SELECT count(*) FROM a {join} b ON a.id = b.id")
    stage = _join_stage(plan)
    (skip,) = skips
    assert [inp.producer for inp in stage.inputs] == [*skip.build, *skip.probe]


@pytest.mark.parametrize("join", ["RIGHT JOIN", "FULL JOIN", "RIGHT ANTI JOIN"])
def test_joins_that_emit_probe_rows_need_their_probe(dctx, join):
    _, skips = _skips(dctx, f"SELECT count(*) FROM a {join} b ON a.id = b.id")
    assert skips == ()
