"""The public API over the embedded cluster: results in every form, UDFs, CSV and JSON tables."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext, udf

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    EnvResolver,
    QueryFailed,
    StaticResolver,
)
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed

CONFIG = DistributedConfig(partitions_per_task=2, bytes_per_partition=1)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    rows = 3000
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "grp": pa.array([f"g{i % 7}" for i in range(rows)]),
            "x": pa.array([float(i % 101) / 3 for i in range(rows)]),
        }
    )
    for fmt in ("parquet", "csv", "json"):
        (root / fmt).mkdir()
    for part in range(4):
        chunk = table.slice(part * rows // 4, rows // 4)
        pq.write_table(chunk, root / "parquet" / f"part-{part}.parquet")
        pa_csv.write_csv(chunk, root / "csv" / f"part-{part}.csv")
        with open(root / "json" / f"part-{part}.json", "w") as f:
            for record in chunk.to_pylist():
                f.write(json.dumps(record) + "\n")
    return root


def register(ctx: SessionContext, root) -> SessionContext:
    ctx.register_parquet("t_parquet", str(root / "parquet"))
    ctx.register_csv("t_csv", str(root / "csv"))
    ctx.register_json("t_json", str(root / "json"))
    return ctx


@pytest.fixture(scope="module")
def dctx(data_dir):
    with DistributedContext(register(SessionContext(), data_dir), config=CONFIG) as d:
        yield d


@pytest.fixture(scope="module")
def single(data_dir):
    return register(SessionContext(), data_dir)


@pytest.mark.parametrize("table", ["t_parquet", "t_csv", "t_json"])
def test_formats_run_distributed_and_match(dctx, single, table):
    sql = f"SELECT grp, count(*) AS n, sum(x) AS s FROM {table} WHERE id % 3 <> 0 GROUP BY grp"
    df = dctx.sql(sql)
    assert df.distributed_plan().is_distributed
    assert_tables_equal(df.to_arrow_table(), single.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(dctx)


def test_python_udf_runs_on_workers(dctx, single):
    double_it = udf(lambda arr: pc.multiply(arr, 2), [pa.float64()], pa.float64(), "immutable", "double_it")
    dctx.register_udf(double_it)
    single.register_udf(double_it)
    sql = "SELECT grp, sum(double_it(x)) AS s FROM t_parquet GROUP BY grp"
    df = dctx.sql(sql)
    assert df.distributed_plan().is_distributed
    assert_tables_equal(df.to_arrow_table(), single.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_distributed(dctx)


class UdfError(Exception):
    pass


def raising(exc: Exception):
    def raise_it(arr: pa.Array) -> pa.Array:
        raise exc

    return raise_it


@pytest.mark.parametrize(
    ("exc", "shown"),
    [
        (ValueError("bad input"), "ValueError: bad input"),
        (UdfError('it\'s "quoted"\nand two lines'), f'{__name__}.UdfError: it\'s "quoted"\nand two lines'),
        (ZeroDivisionError(), "ZeroDivisionError"),
    ],
)
@pytest.mark.parametrize("where", ["worker", "coordinator"])
def test_a_failing_udf_is_reported_as_its_exception(dctx, exc, shown, where):
    name = f"raising_{type(exc).__name__.lower()}"
    dctx.register_udf(udf(raising(exc), [pa.float64()], pa.float64(), "immutable", name))
    if where == "worker":
        sql = f"SELECT grp, sum({name}(x)) AS s FROM t_parquet GROUP BY grp"
        assert dctx.sql(sql).distributed_plan().is_distributed
    else:  # a last stage of one task runs in the coordinator
        sql = f"SELECT {name}(x) FROM t_parquet WHERE id = 1 LIMIT 1"
    with pytest.raises(QueryFailed) as raised:
        dctx.sql(sql).to_arrow_table()
    message = str(raised.value)
    assert f"on the {where}" in message or where == "worker"
    assert "PyErr" not in message
    assert f"Execution error: {shown}\nTraceback (most recent call last):\n" in message
    assert "in raise_it" in message


def test_result_forms(dctx, single):
    sql = "SELECT id, grp FROM t_parquet WHERE id < 10 ORDER BY id"
    expected = single.sql(sql).to_arrow_table()
    df = dctx.sql(sql)
    assert df.to_arrow_table().equals(expected)
    assert df.to_pylist() == expected.to_pylist()
    assert df.to_pandas()["id"].tolist() == list(range(10))
    assert df.to_polars()["id"].to_list() == list(range(10))
    assert sum(b.num_rows for b in df.collect()) == 10
    assert sum(b.num_rows for b in df.execute_stream()) == 10
    assert dctx.sql("SELECT * FROM t_parquet").count() == 3000


def test_empty_result_keeps_schema(dctx):
    table = dctx.sql("SELECT id, grp FROM t_parquet WHERE id < 0").to_arrow_table()
    assert table.num_rows == 0
    assert table.column_names == ["id", "grp"]


def test_table_and_read_parquet(dctx, data_dir):
    assert dctx.table("t_parquet").count() == 3000
    assert dctx.read_parquet(str(data_dir / "parquet")).count() == 3000


REGISTER_CALLS = ["register_parquet", "register_csv", "register_json", "register_arrow", "register_avro"]
READ_CALLS = ["read_parquet", "read_csv", "read_json", "read_arrow", "read_avro"]


@pytest.mark.parametrize("call", REGISTER_CALLS + ["register_listing_table"] + READ_CALLS)
def test_a_missing_path_raises_file_not_found_naming_it(dctx, tmp_path, call):
    extension = "parquet" if call == "register_listing_table" else call.split("_", 1)[1]
    missing = str(tmp_path / "no" / f"such.{extension}")
    args = (missing,) if call.startswith("read_") else ("missing_t", missing)
    with pytest.raises(FileNotFoundError, match="such") as raised:
        getattr(dctx, call)(*args)
    assert raised.value.filename == missing
    assert missing in str(raised.value)
    assert not dctx.table_exist("missing_t")


def test_a_missing_file_url_is_named_too(dctx, tmp_path):
    missing = f"file://{tmp_path / 'gone.csv'}"
    with pytest.raises(FileNotFoundError) as raised:
        dctx.register_csv("missing_t", missing)
    assert raised.value.filename == missing


def test_other_registration_failures_are_query_failures(dctx, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(QueryFailed, match="No files found"):
        dctx.register_parquet("empty_t", str(tmp_path / "empty"))


def test_show_and_explain(dctx, capsys):
    df = dctx.sql("SELECT grp, count(*) FROM t_parquet GROUP BY grp")
    df.show()
    df.explain()
    out = capsys.readouterr().out
    assert "g0" in out and "Stage" in out


def test_bad_sql_names_the_problem(dctx):
    with pytest.raises(Exception, match="no_such_table"):
        dctx.sql("SELECT * FROM no_such_table").to_arrow_table()


def test_resolvers(monkeypatch):
    assert StaticResolver(["grpc://127.0.0.1:1"]).get_urls() == ["grpc://127.0.0.1:1"]
    with pytest.raises(ValueError, match="must start with grpc"):
        StaticResolver(["http://x"])
    monkeypatch.setenv("DATAFUSION_DISTRIBUTED_WORKERS", "grpc://127.0.0.1:1, grpc://127.0.0.1:2")
    assert EnvResolver().get_urls() == ["grpc://127.0.0.1:1", "grpc://127.0.0.1:2"]
    monkeypatch.setenv("DATAFUSION_DISTRIBUTED_WORKERS", "")
    with pytest.raises(ValueError, match="lists no worker"):
        EnvResolver().get_urls()


def test_dataframe_transformations_stay_distributed(dctx, single):
    from datafusion import col, lit
    from datafusion import functions as f

    df = (
        dctx.table("t_parquet")
        .filter(col("id") % lit(3) != lit(0))
        .aggregate([col("grp")], [f.count(col("id")).alias("n")])
        .sort(col("grp").sort())
    )
    assert isinstance(df, type(dctx.sql("SELECT 1")))
    assert df.distributed_plan().is_distributed
    expected = single.sql(
        "SELECT grp, count(id) AS n FROM t_parquet WHERE id % 3 <> 0 GROUP BY grp ORDER BY grp"
    )
    assert df.to_pylist() == expected.to_pylist()
    with pytest.raises(AttributeError, match="use .df.write_parquet_with_options"):
        df.write_parquet_with_options  # noqa: B018


def test_context_factories_make_distributed_frames(dctx):
    df = dctx.from_pydict({"a": [1, 2, 3]})
    assert df.count() == 3


def test_a_query_releases_only_the_workers_it_ran_tasks_on(data_dir, monkeypatch):
    from datafusion_distributed.protocol.flight import WorkerClient

    released = []
    original = WorkerClient.cancel
    monkeypatch.setattr(
        WorkerClient, "cancel", lambda self, query_id: released.append(self.url) or original(self, query_id)
    )
    ctx = SessionContext()
    ctx.register_parquet("t", str(data_dir / "parquet"))

    class FirstTwoWorkers:  # tasks go to two of the four workers only
        def route_task(self, request):
            return request.workers[request.task % 2]

    config = DistributedConfig(partitions_per_task=1, bytes_per_partition=1, embedded_workers=4)
    with DistributedContext(ctx, config=config, handlers=[FirstTwoWorkers()]) as dctx:
        dctx.sql("SELECT 1 AS one").to_arrow_table()  # runs in the coordinator: no worker called
        assert released == []

        df = dctx.sql("SELECT grp, count(*) AS n FROM t GROUP BY grp")
        df.to_arrow_table()
        ran = {task.worker for stage in df.metrics.stages.values() for task in stage.tasks}
        ran.discard("coordinator")
        assert len(ran) == 2
        assert sorted(released) == sorted(ran)
        assert dctx._cluster.spool_files() == []


def test_the_session_hook_builds_sessions_once_not_per_query(data_dir):
    built = []

    def hook(config):
        built.append(config)
        return SessionContext(config)

    ctx = SessionContext()
    ctx.register_parquet("t", str(data_dir / "parquet"))
    sql = "SELECT grp, count(*) AS n FROM t GROUP BY grp ORDER BY grp"
    with DistributedContext(ctx, config=CONFIG, session_builder=hook) as dctx:
        dctx.sql(sql).to_arrow_table()
        first = len(built)  # the head's, and one per worker that ran a task
        for _ in range(3):
            dctx.sql(sql).to_arrow_table()
        assert 2 <= first <= len(dctx.workers()) + 1
    assert len(built) == first
