"""Replacing a subtree of serialised plan bytes, by occurrence, and running the result."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec import SpliceError, replace_subtree, restrict_file_groups, subtree_offsets
from datafusion_distributed.codec.wire import encode_len_field, encode_varint_field, iter_fields
from datafusion_distributed.execution_plans.plan_node import PlanNode

# ---------------------------------------------------------------------------------------
# Hand-made messages
# ---------------------------------------------------------------------------------------


def test_offsets_count_only_whole_field_payloads():
    old = b"abc"
    msg = (
        encode_len_field(1, old)  # a whole payload
        + encode_len_field(2, b"xabcx")  # contains old, but is not old
        + encode_len_field(3, encode_len_field(4, old))  # nested whole payload
        + encode_varint_field(5, 7)
    )
    assert len(subtree_offsets(msg, old)) == 2
    assert msg.count(old) == 3


def test_replace_by_occurrence_reencodes_enclosing_lengths():
    old = b"abc"
    msg = encode_len_field(1, old) + encode_len_field(3, encode_len_field(4, old) + encode_varint_field(6, 1))
    new = b"N" * 300  # long enough to grow every enclosing length prefix by a byte
    second = replace_subtree(msg, old, new, occurrence=1)
    fields = list(iter_fields(second))
    assert fields[0].payload(second) == old
    inner = fields[1].payload(second)
    assert [(f.number, f.payload(inner)) for f in iter_fields(inner)][0] == (4, new)
    first = replace_subtree(msg, old, new, occurrence=0)
    assert list(iter_fields(first))[0].payload(first) == new
    assert list(iter_fields(first))[1].payload(first) == list(iter_fields(msg))[1].payload(msg)


def test_whole_plan_is_its_own_subtree():
    assert replace_subtree(b"plan", b"plan", b"other") == b"other"
    with pytest.raises(SpliceError):
        replace_subtree(b"plan", b"plan", b"other", occurrence=1)


def test_absent_subtree_raises():
    msg = encode_len_field(1, b"abc")
    with pytest.raises(SpliceError, match="occurrence 0 not found: the plan holds 0 copies"):
        replace_subtree(msg, b"zzz", b"new")
    with pytest.raises(SpliceError, match="occurrence 1 not found: the plan holds 1 copies"):
        replace_subtree(msg, b"abc", b"new", occurrence=1)
    assert issubclass(SpliceError, ValueError)


# ---------------------------------------------------------------------------------------
# Real plans: a self-join whose two sides are identical subtrees
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("splice")
    for f in range(3):  # file f holds keys 0..9, each tagged with the file's number
        pq.write_table(pa.table({"k": list(range(10)), "f": [f] * 10}), folder / f"part-{f}.parquet")
    # Without dynamic filters both sides of a self-join serialise to the same bytes.
    config = (
        SessionConfig()
        .with_target_partitions(3)
        .set("datafusion.optimizer.enable_dynamic_filter_pushdown", "false")
    )
    ctx = SessionContext(config)
    ctx.register_parquet("t", str(folder))
    return ctx


SELF_JOIN = "SELECT a.f AS af, b.f AS bf, count(*) AS n FROM t a JOIN t b ON a.k = b.k GROUP BY 1, 2"


def _scans(root: PlanNode) -> list[PlanNode]:
    return [n for n in root.walk() if n.name == "DataSourceExec"]


def _run(ctx: SessionContext, raw: bytes) -> list[dict]:
    plan = ExecutionPlan.from_bytes(ctx, raw)
    rows = []
    for partition in range(plan.partition_count):
        for batch in ctx.execute(plan, partition):
            rows.extend(batch.to_pyarrow().to_pylist())
    return sorted(rows, key=lambda r: (r["af"], r["bf"]))


def test_self_join_sides_are_identical_subtrees(ctx):
    root = PlanNode.from_plan(ctx.sql(SELF_JOIN).execution_plan())
    left, right = _scans(root)
    assert left.raw == right.raw
    assert len(subtree_offsets(root.raw, left.raw)) == 2


@pytest.mark.parametrize("occurrence", [0, 1])
def test_replace_one_side_of_a_self_join(ctx, occurrence):
    """Restrict one side to file 2: only that side's `f` collapses to 2."""
    root = PlanNode.from_plan(ctx.sql(SELF_JOIN).execution_plan())
    scan = _scans(root)[0]
    restricted = restrict_file_groups(scan.raw, [2])
    spliced = replace_subtree(root.raw, scan.raw, restricted, occurrence)
    rows = _run(ctx, spliced)
    # Occurrences count in byte order, which is the depth-first order of the children:
    # occurrence 0 is the join's left (build) side `a`, occurrence 1 its right side `b`.
    restricted_side, other_side = ("af", "bf") if occurrence == 0 else ("bf", "af")
    assert {r[restricted_side] for r in rows} == {2}
    assert {r[other_side] for r in rows} == {0, 1, 2}
    assert all(r["n"] == 10 for r in rows)
    # The untouched side still deserialises to the same subtree.
    plan = PlanNode.from_plan(ExecutionPlan.from_bytes(ctx, spliced))
    kept = [s.raw for s in _scans(plan)]
    assert kept.count(scan.raw) == 1 and kept.count(restricted) == 1


def test_replaced_plan_answers_like_the_equivalent_query(ctx):
    """Replacing both sides in turn (last first) gives the plan of the filtered query."""
    root = PlanNode.from_plan(ctx.sql(SELF_JOIN).execution_plan())
    scan = _scans(root)[0]
    spliced = replace_subtree(root.raw, scan.raw, restrict_file_groups(scan.raw, [1]), 1)
    spliced = replace_subtree(spliced, scan.raw, restrict_file_groups(scan.raw, [0]), 0)
    assert _run(ctx, spliced) == [{"af": 0, "bf": 1, "n": 10}]
    expected = ctx.sql(f"SELECT * FROM ({SELF_JOIN}) WHERE af = 0 AND bf = 1").to_pylist()
    assert _run(ctx, spliced) == expected


def test_replacing_a_missing_subtree_of_a_real_plan_raises(ctx):
    root = PlanNode.from_plan(ctx.sql(SELF_JOIN).execution_plan())
    scan = _scans(root)[0]
    with pytest.raises(SpliceError, match="holds 2 copies"):
        replace_subtree(root.raw, scan.raw, b"", occurrence=2)
    other = PlanNode.from_plan(ctx.sql("SELECT k FROM t WHERE f = 1").execution_plan())
    with pytest.raises(SpliceError):
        replace_subtree(root.raw, other.raw, b"")
