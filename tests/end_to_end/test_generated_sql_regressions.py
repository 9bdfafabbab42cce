"""Queries the differential SQL generator (devtools/fuzz) once found answered differently
distributed: each runs with distribution forced, must give single-node DataFusion's answer
(or error), and must show that it ran as several tasks, on the embedded cluster and on worker
processes that share nothing (every exchange fetched over Flight)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext, udaf

from datafusion_distributed import DistributedContext, LocalCluster, QueryFailed
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.forced import forced_distribution


def _context(batch_size: int | None = None, partitions: int = 4) -> SessionContext:
    config = SessionConfig().with_target_partitions(partitions)
    if batch_size is not None:
        config = config.set("datafusion.execution.batch_size", str(batch_size))
    return SessionContext(config)


def _memory_table(ctx: SessionContext, name: str, table: pa.Table, partitions: int) -> None:
    rows = -(-table.num_rows // partitions)
    ctx.register_record_batches(name, [[batch] for batch in table.to_batches(max_chunksize=rows)])


def _parquet_table(ctx: SessionContext, name: str, folder, files: list[pa.Table]) -> None:
    folder.mkdir()
    for i, part in enumerate(files):
        pq.write_table(part, folder / f"part-{i}.parquet")
    ctx.register_parquet(name, str(folder))


def _same_distributed(ctx: SessionContext, dctx: DistributedContext, sql: str) -> None:
    """`sql` answers through `dctx` as on `ctx`, and ran as several tasks."""
    expected = ctx.sql(sql).to_arrow_table()
    df = dctx.sql(sql)
    plan = df.distributed_plan()
    assert plan.is_distributed and not plan.single_node, plan.single_node
    assert_tables_equal(df.to_arrow_table(), expected, sql=sql)
    assert_ran_distributed(df)


@pytest.fixture(scope="module")
def separate_workers():
    with LocalCluster(3, share_spools=False) as cluster:
        yield cluster


@pytest.fixture(params=["embedded", "separate workers"])
def workers(request):
    """The embedded cluster (None), or three worker processes sharing nothing."""
    return None if request.param == "embedded" else request.getfixturevalue("separate_workers")


def _distributed(ctx: SessionContext, workers, **config) -> DistributedContext:
    return DistributedContext(ctx, workers=workers, **forced_distribution(query_timeout=60, **config))


# -- a memory table collected whole by a join in a stage split into several tasks ------------


def _supplier_and_memory(ctx: SessionContext) -> None:
    supplier = pa.table(
        {"s_nationkey": pa.array([i % 25 for i in range(1000)]), "sid": pa.array(range(1000))}
    )
    _memory_table(ctx, "supplier", supplier, 4)
    _memory_table(ctx, "m", pa.table({"k": pa.array(range(98)), "id": pa.array(range(98))}), 3)


COLLECTED_MEMORY_TABLES = {
    "non-equi join": "SELECT count(*) FROM supplier t1 JOIN m t2 ON (t1.s_nationkey < t2.k OR t2.id <> 35)",
    "cross join": "SELECT count(*), sum(t1.sid + t2.k) FROM supplier t1 CROSS JOIN m t2",
    "non-equi join under a full join": (
        "SELECT count(*), count(x.sid), count(y.k) FROM "
        "(SELECT t1.sid, t2.k FROM supplier t1 JOIN m t2 ON t1.s_nationkey < t2.k) x "
        "FULL JOIN m y ON x.k = y.id"
    ),
    "non-equi join in a union all": (
        "SELECT count(*) FROM (SELECT t1.sid FROM supplier t1 JOIN m t2 ON t1.s_nationkey > t2.k "
        "UNION ALL SELECT id FROM m)"
    ),
}


@pytest.mark.parametrize("sql", COLLECTED_MEMORY_TABLES.values(), ids=COLLECTED_MEMORY_TABLES.keys())
def test_a_memory_table_a_join_collects_is_read_whole_by_every_task(workers, sql):
    """Folded back into a split stage, the collected side's memory table was read in shares,
    one per task, and rows were lost: 49000 rows for 98000."""
    ctx = _context()
    _supplier_and_memory(ctx)
    with _distributed(ctx, workers, memory_table_inline_bytes=0, partitions_per_task=1) as dctx:
        _same_distributed(ctx, dctx, sql)


# -- dictionary columns through exchange files and Flight -----------------------------------


def test_a_dictionary_column_whose_first_batches_are_null(tmp_path, workers):
    """An exchange file's first batch held an all-null dictionary column with an empty
    dictionary: Arrow's file writer then took the next dictionary for a replacement."""
    ctx = _context(batch_size=5, partitions=2)
    files = []
    for i in range(12):
        values = [None] * 10 if i == 0 else [f"v{(j * 7 + i) % 5}" if j % 3 else None for j in range(10)]
        files.append(
            pa.table(
                {
                    "id": pa.array(range(i * 10, i * 10 + 10)),
                    "dk": pa.array(values, pa.string()).dictionary_encode(),
                }
            )
        )
    _parquet_table(ctx, "t", tmp_path / "t", files)
    with _distributed(ctx, workers) as dctx:
        _same_distributed(ctx, dctx, "SELECT a.dk, b.id FROM t a JOIN t b ON a.id = b.id")
        _same_distributed(ctx, dctx, "SELECT id % 3 AS g, array_agg(dk ORDER BY dk) FROM t GROUP BY 1")


def test_a_memory_table_s_dictionary_column_crosses_flight(tmp_path, separate_workers):
    """Streamed to the coordinator over Flight, a dictionary column's batches came without
    their dictionary: "IPC stream did not have the expected number (1) of dictionaries"."""
    ctx = _context()
    files = [
        pa.table({"id": pa.array(range(i * 10, i * 10 + 10)), "amt": [1.5 * j for j in range(10)]})
        for i in range(3)
    ]
    _parquet_table(ctx, "c", tmp_path / "c", files)
    m = pa.table(
        {
            "id": pa.array(range(0, 40, 2)),
            "dk": pa.array([None if j % 4 == 0 else f"k{j % 3}" for j in range(20)]).dictionary_encode(),
            "s": [f"a{j % 5}" if j % 2 else "zz" for j in range(20)],
        }
    )
    _memory_table(ctx, "m", m, 4)
    ctx.sql("SET datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery = false")
    sql = "SELECT -c.amt, m.dk, c.id, m.id FROM c JOIN m ON c.id = m.id WHERE m.s < 'ab'"
    for shipped in (1 << 20, 0):
        with _distributed(ctx, separate_workers, memory_table_inline_bytes=shipped) as dctx:
            _same_distributed(ctx, dctx, sql)


# -- a join whose build side is empty never runs its probe side -----------------------------


def _empty_and_overflowing(ctx: SessionContext, tmp_path) -> None:
    """`e` has no row; one row of `a` has an `n` too large for DECIMAL(12, 2)."""
    files = [
        pa.table(
            {"id": pa.array(range(i * 10, i * 10 + 10)), "n": [2**40 if j == 3 else j for j in range(10)]}
        )
        for i in range(3)
    ]
    _parquet_table(ctx, "a", tmp_path / "a", files)
    _parquet_table(ctx, "e", tmp_path / "e", [pa.table({"id": pa.array([], pa.int64())})])


OVERFLOWING_PROBE = "(SELECT id FROM a WHERE CAST(n AS DECIMAL(12, 2)) IS NULL)"
EMPTY_BUILD = {
    "inner": f"SELECT e.id FROM e JOIN {OVERFLOWING_PROBE} p ON e.id = p.id",
    "left": f"SELECT count(*) FROM e LEFT JOIN {OVERFLOWING_PROBE} p ON e.id = p.id",
    "left anti": f"SELECT count(*) FROM e LEFT ANTI JOIN {OVERFLOWING_PROBE} p ON e.id = p.id",
    "right semi": f"SELECT count(*) FROM e RIGHT SEMI JOIN {OVERFLOWING_PROBE} p ON e.id = p.id",
}


@pytest.mark.parametrize("sql", EMPTY_BUILD.values(), ids=EMPTY_BUILD.keys())
def test_the_probe_side_of_a_join_with_an_empty_build_side_does_not_fail_the_query(tmp_path, workers, sql):
    """DataFusion never reads the probe side when the build side is empty: its error (here
    a cast that overflows) is not the query's."""
    ctx = _context()
    _empty_and_overflowing(ctx, tmp_path)
    with _distributed(ctx, workers) as dctx:
        _same_distributed(ctx, dctx, sql)


def test_the_probe_side_s_error_stands_when_the_build_side_has_rows(tmp_path):
    ctx = _context()
    _empty_and_overflowing(ctx, tmp_path)
    sql = f"SELECT count(*) FROM a x JOIN {OVERFLOWING_PROBE} p ON x.id = p.id"
    with pytest.raises(Exception, match="too large to store in a Decimal128"):
        ctx.sql(sql).to_arrow_table()
    with _distributed(ctx, None) as dctx:
        assert dctx.sql(sql).distributed_plan().is_distributed
        with pytest.raises(QueryFailed, match="too large to store in a Decimal128"):
            dctx.sql(sql).to_arrow_table()


# -- compiled functions registered on the user's context ------------------------------------


def _with_mode(ctx: SessionContext) -> SessionContext:
    from datafusion_extra_functions import udaf_by_name

    ctx.register_udaf(udaf(udaf_by_name("mode")))
    return ctx


def test_a_compiled_function_only_the_context_knows_runs_on_one_node_saying_why():
    ctx = _with_mode(_context())
    _memory_table(ctx, "t", pa.table({"g": [i % 3 for i in range(100)], "v": [i % 7 for i in range(100)]}), 4)
    sql = "SELECT g, mode(v) FROM t GROUP BY g"
    with _distributed(ctx, None) as dctx:
        df = dctx.sql(sql)
        assert (
            "aggregate function mode is registered on this context only" in df.distributed_plan().single_node
        )
        assert_tables_equal(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), sql=sql)
    with DistributedContext(
        ctx, session_builder=lambda config: _with_mode(SessionContext(config)), **forced_distribution()
    ) as dctx:
        _same_distributed(ctx, dctx, sql)
