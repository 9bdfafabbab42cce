"""The round-trip check tells DataFusion's harmless rewrites on decoding from lost constructs."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datafusion import SessionConfig, SessionContext

from datafusion_distributed.distributed_planner.fidelity import round_trip_difference
from datafusion_distributed.distributed_planner.repeated_casts import without_repeated_casts


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    table = pa.table(
        {
            "id": pa.array(range(10)),
            "k": pa.array([i % 3 for i in range(10)]),
            "dt": pa.array([None] * 10, pa.date32()),
            "d": pa.array([None] * 10, pa.decimal128(12, 2)),
        }
    )
    ctx.register_record_batches("m", [[batch] for batch in table.to_batches(max_chunksize=4)])
    return ctx


UNIONS = {
    "coalesced key": "(SELECT coalesce(k, 0) AS c0 FROM m) UNION (SELECT id AS c0 FROM m)",
    "date and interval, sorted": (
        "(SELECT coalesce(k, 0) AS c0, dt + INTERVAL '1 day' AS c1 FROM m WHERE id > 2 ORDER BY 1) "
        "UNION ALL (SELECT id AS c0, coalesce(dt, DATE '2000-01-01') AS c1 FROM m) ORDER BY 1, 2"
    ),
    "decimals widened": (
        "(SELECT coalesce(k, 0) AS c0, d * 2 AS c1 FROM m ORDER BY 1) "
        "UNION ALL (SELECT id AS c0, coalesce(d, 0) AS c1 FROM m) ORDER BY 1, 2"
    ),
}


@pytest.mark.parametrize("sql", UNIONS.values(), ids=UNIONS.keys())
def test_a_union_input_decoded_with_its_casts_repeated_travels_faithfully(ctx, sql):
    """DataFusion 55 decodes these with one more projection per union input, casting each
    column again to its own type: the same rows, so no reason to keep them on one node."""
    plan = ctx.sql(sql).execution_plan()
    assert round_trip_difference(plan, plan.to_bytes(), ctx) is None


def test_only_casts_to_the_type_already_cast_to_are_taken_out():
    repeated = [
        "UnionExec",
        "  ProjectionExec: expr=[CAST(c0@0 AS Int64) as c0, c1@1 as c1]",
        "    ProjectionExec: expr=[CAST(CASE WHEN k@0 IS NOT NULL THEN k@0 ELSE 0 END AS Int64) as c0, d@1 as c1]",
        "      DataSourceExec: partitions=3",
    ]
    assert without_repeated_casts(repeated) == [repeated[0], *(line[2:] for line in repeated[2:])]
    other_type = [
        *repeated[:1],
        repeated[1].replace("AS Int64) as c0, c1", "AS Int32) as c0, c1"),
        *repeated[2:],
    ]
    assert without_repeated_casts(other_type) == other_type
    reordered = [*repeated[:1], "  ProjectionExec: expr=[c1@1 as c0, c0@0 as c1]", *repeated[2:]]
    assert without_repeated_casts(reordered) == reordered
    not_one_cast = [
        *repeated[:2],
        repeated[2].replace("CAST(CASE WHEN", "CAST(k@0 AS Int64) + CAST(CASE WHEN"),
        repeated[3],
    ]
    assert without_repeated_casts(not_one_cast) == not_one_cast
