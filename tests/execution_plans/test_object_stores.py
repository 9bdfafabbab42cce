"""Tables in an S3 bucket, read by every worker: TPC-H uploaded to a local S3-API server (moto,
on 127.0.0.1), registered at s3:// URLs, queried distributed against single-node DataFusion
reading the same bucket; and the credentials never shown anywhere."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from datafusion import SessionConfig, SessionContext
from datafusion.object_store import AmazonS3

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    EmbeddedCluster,
    LocalCluster,
    QueryFailed,
)
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, tpch_query
from tests.support.s3_server import (
    TEST_ACCESS_KEY_ID,
    TEST_REGION,
    TEST_SECRET_ACCESS_KEY,
    LocalS3Server,
    register_tpch_s3,
    upload_tpch,
)

BUCKET = "tpch-data"
QUICK_QUERIES = (1, 5, 18)
SPLIT = DistributedConfig(bytes_per_partition=64 * 1024)  # several tasks per stage at SF 0.01


@pytest.fixture(scope="module")
def s3(tpch_sf001: Path):
    """A local S3 server holding TPC-H SF 0.01 under `sf001/`."""
    with LocalS3Server() as server:
        server.create_bucket(BUCKET)
        upload_tpch(server, tpch_sf001, BUCKET, "sf001")
        yield server


def _single_node(s3: LocalS3Server, prefix: str) -> SessionContext:
    """The oracle: plain DataFusion reading the same bucket."""
    ctx = SessionContext()
    ctx.register_object_store("s3://", s3.store(BUCKET).build(), BUCKET)
    register_tpch_s3(ctx, BUCKET, prefix)
    return ctx


def _distributed(s3: LocalS3Server, prefix: str, **kwargs) -> DistributedContext:
    dctx = DistributedContext(SessionContext(), **kwargs)
    dctx.register_object_store(f"s3://{BUCKET}", s3.store(BUCKET))
    register_tpch_s3(dctx, BUCKET, prefix)
    return dctx


@pytest.mark.parametrize("n", QUICK_QUERIES, ids=lambda n: f"q{n:02d}")
def test_tpch_from_s3_on_the_embedded_cluster_matches_single_node(s3, n):
    expected = _single_node(s3, "sf001").sql(tpch_query(n)).to_arrow_table()
    with _distributed(s3, "sf001", config=SPLIT) as dctx:
        df = dctx.sql(tpch_query(n))
        assert_tables_equal(df.to_arrow_table(), expected, sql=tpch_query(n))
        assert_ran_distributed(df)


@pytest.mark.slow
def test_tpch_from_s3_on_three_worker_processes_matches_single_node(s3, tpch_sf01):
    upload_tpch(s3, tpch_sf01, BUCKET, "sf01")
    oracle = _single_node(s3, "sf01")
    with LocalCluster(3) as cluster, _distributed(s3, "sf01", workers=cluster, config=SPLIT) as dctx:
        for n in TPCH_QUERY_NUMBERS:
            sql = tpch_query(n)
            df = dctx.sql(sql)
            assert_tables_equal(df.to_arrow_table(), oracle.sql(sql).to_arrow_table(), sql=sql)
            assert_ran_distributed(df)


def test_credentials_are_never_shown(s3, tpch_sf001, caplog):
    """Not in log records (the embedded workers' included), explain(), reprs, error messages
    or the files a query leaves in the workers' spools while it runs."""
    caplog.set_level(logging.DEBUG)
    sql = tpch_query(3)
    with _distributed(s3, "sf001", config=SPLIT) as dctx:
        df = dctx.sql(sql)
        shown = [df.explain_string(), df.explain_string(analyze=True), repr(df.distributed_plan())]
        shown += [repr(dctx.object_stores), str(dctx.object_stores[0])]
        batches = iter(df)
        next(batches)  # the query's outputs are in the spools until the stream ends
        spooled = [path for path in Path(dctx.resolver.shared_spool_root).rglob("*") if path.is_file()]
        assert spooled
        for path in spooled:
            assert TEST_SECRET_ACCESS_KEY.encode() not in path.read_bytes(), path
        list(batches)
        key = "sf001/orders/orders.1.parquet"
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"not a parquet file")
        try:
            with pytest.raises(QueryFailed, match="orders.1.parquet") as failed:
                dctx.sql(sql).collect()
        finally:
            s3.client().upload_file(str(tpch_sf001 / "orders" / "orders.1.parquet"), BUCKET, key)
    shown.append(str(failed.value))
    shown += [record.getMessage() for record in caplog.records]
    assert "object stores: s3://tpch-data (endpoint http://127.0.0.1:" in shown[0]
    for text in shown:
        assert TEST_SECRET_ACCESS_KEY not in text


ONE_NODE_STORE = (
    "DataSourceExec reads s3://tpch-data/, whose object store is registered only on the SessionContext"
)


@pytest.fixture(scope="module")
def session_store_only(s3):
    """A context whose bucket is registered the DataFusion way, on its SessionContext alone."""
    with DistributedContext(SessionContext(), config=SPLIT) as dctx:
        datafusions_own = AmazonS3(
            bucket_name=BUCKET,
            region=TEST_REGION,
            endpoint=s3.endpoint,
            access_key_id=TEST_ACCESS_KEY_ID,
            secret_access_key=TEST_SECRET_ACCESS_KEY,
            allow_http=True,
        )
        dctx.ctx.register_object_store("s3://", datafusions_own, BUCKET)
        register_tpch_s3(dctx, BUCKET, "sf001")
        yield dctx


@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_a_store_registered_only_on_the_session_context_runs_on_one_node(s3, session_store_only, n):
    """DataFusion's own store objects cannot travel to the workers: a query reading through one
    runs on one node, in the user's context, with the reason shown, and answers as DataFusion."""
    sql = tpch_query(n)
    df = session_store_only.sql(sql)
    assert not df.distributed_plan().is_distributed
    assert ONE_NODE_STORE in df.explain_string()
    assert_tables_equal(df.to_arrow_table(), _single_node(s3, "sf001").sql(sql).to_arrow_table(), sql=sql)
    assert_ran_on_one_node(df)


def test_the_one_node_note_names_the_store(session_store_only):
    assert f"one node ({ONE_NODE_STORE}" in session_store_only.sql(tpch_query(3))._repr_html_()
    with pytest.raises(TypeError, match="takes an S3Store.*on one node"):
        session_store_only.register_object_store("s3://", AmazonS3(bucket_name=BUCKET), BUCKET)


def test_a_session_hook_may_register_a_store_the_library_does_not_send(s3):
    """With a session hook the workers' sessions may have the store: the query is distributed."""
    store = s3.store(BUCKET)

    def with_the_bucket(config: SessionConfig) -> SessionContext:
        ctx = SessionContext(config)
        ctx.register_object_store("s3://", store.build(), BUCKET)
        return ctx

    sql = tpch_query(5)
    with DistributedContext(_single_node(s3, "sf001"), session_builder=with_the_bucket, config=SPLIT) as dctx:
        df = dctx.sql(sql)
        assert_tables_equal(df.to_arrow_table(), _single_node(s3, "sf001").sql(sql).to_arrow_table(), sql=sql)
        assert_ran_distributed(df)


def test_a_store_one_query_brought_is_not_used_by_another(s3):
    """Two contexts on one cluster: the second registered its store only on its SessionContext
    and has a session hook (so its queries are distributed) that registers none: its query
    fails naming the fix, even though the workers hold the first context's store of that bucket."""
    with EmbeddedCluster(2) as cluster:
        with _distributed(s3, "sf001", workers=cluster, config=SPLIT) as first:
            assert first.sql("SELECT count(*) AS n FROM nation").to_pylist() == [{"n": 25}]
            assert first.sql(tpch_query(3)).count() == 10
            with DistributedContext(
                _single_node(s3, "sf001"), workers=cluster, config=SPLIT, session_builder=SessionContext
            ) as second:
                with pytest.raises(QueryFailed, match="register_object_store.*S3Store") as failed:
                    second.sql(tpch_query(3)).collect()
                assert "No suitable object store found for s3://tpch-data" in str(failed.value)


def test_credentials_from_the_environment(s3, monkeypatch):
    """A store without keys takes them from the AWS_* variables of each process that builds it
    (here one process: the embedded workers'); the task messages then carry none."""
    from datafusion_distributed import S3Store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_SECRET_ACCESS_KEY)
    monkeypatch.setenv("AWS_REGION", TEST_REGION)
    store = S3Store(BUCKET, endpoint=s3.endpoint)
    assert store.credentials == "from the environment"
    expected = _single_node(s3, "sf001").sql(tpch_query(5)).to_arrow_table()
    with DistributedContext(SessionContext(), config=SPLIT) as dctx:
        dctx.register_object_store(f"s3://{BUCKET}", store)
        register_tpch_s3(dctx, BUCKET, "sf001")
        df = dctx.sql(tpch_query(5))
        assert "credentials from the environment" in df.explain_string()
        assert_tables_equal(df.to_arrow_table(), expected, sql=tpch_query(5))
        assert_ran_distributed(df)


def _written_rows(oracle: SessionContext, url: str, order: str):
    """What a write left at `url`, read back by single-node DataFusion, in `order`."""
    name = "written_" + url.rstrip("/").rsplit("/", 1)[-1].replace("-", "_")
    oracle.register_parquet(name, url)
    try:
        return oracle.sql(f"SELECT * FROM {name} ORDER BY {order}").to_arrow_table()
    finally:
        oracle.deregister_table(name)


def _visible_keys(s3: LocalS3Server, prefix: str) -> list[str]:
    """The keys under `prefix` a table over it reads (not hidden, not empty markers)."""
    return [key for key in s3.keys(BUCKET, prefix) if "/." not in key and not key.endswith("/")]


def test_a_copy_to_s3_is_written_by_the_tasks_and_matches_single_node(s3):
    select = "SELECT l_orderkey, l_linenumber, l_returnflag, l_quantity FROM lineitem"
    oracle = _single_node(s3, "sf001")
    expected = oracle.sql(
        f"COPY ({select}) TO 's3://{BUCKET}/copies/single/' STORED AS PARQUET PARTITIONED BY (l_returnflag)"
    ).to_pylist()
    with _distributed(s3, "sf001", config=SPLIT) as dctx:
        df = dctx.sql(
            f"COPY ({select}) TO 's3://{BUCKET}/copies/distributed/' STORED AS PARQUET "
            "PARTITIONED BY (l_returnflag)"
        )
        plan = df.distributed_plan()
        assert plan.write is not None and plan.final.task_count > 1
        assert "write: parquet files into s3://tpch-data/copies/distributed/" in df.explain_string()
        assert df.to_pylist() == expected
        assert_ran_distributed(df)
    order = "l_orderkey, l_linenumber"
    assert_tables_equal(
        _written_rows(oracle, f"s3://{BUCKET}/copies/distributed/", order),
        _written_rows(oracle, f"s3://{BUCKET}/copies/single/", order),
    )
    keys = _visible_keys(s3, "copies/distributed/")
    assert {key.split("/")[2] for key in keys} == {"l_returnflag=A", "l_returnflag=N", "l_returnflag=R"}
    assert len(keys) >= 2 * 3  # each task wrote its own files, into every hive folder
    assert [key for key in s3.keys(BUCKET, "copies/distributed/") if "/." in key] in (
        [],
        ["copies/distributed/.datafusion-distributed-staging/"],  # an empty folder marker
    )


def test_write_parquet_to_s3_is_distributed(s3):
    oracle = _single_node(s3, "sf001")
    with _distributed(s3, "sf001", config=SPLIT) as dctx:
        df = dctx.sql("SELECT o_orderkey, o_totalprice FROM orders WHERE o_orderkey % 3 = 0")
        df.write_parquet(f"s3://{BUCKET}/frames/orders/")
        assert_ran_distributed(dctx)  # the write
    expected = oracle.sql("SELECT o_orderkey, o_totalprice FROM orders WHERE o_orderkey % 3 = 0 ORDER BY 1")
    written = _written_rows(oracle, f"s3://{BUCKET}/frames/orders/", "o_orderkey")
    assert_tables_equal(written, expected.to_arrow_table())
    assert len(_visible_keys(s3, "frames/orders/")) > 1


def test_a_failed_write_to_s3_leaves_nothing(s3):
    """A task fails part way (a cast only some rows break): the objects other tasks staged are
    deleted, and nothing appears at the destination."""
    failing = (
        f"COPY (SELECT l_orderkey, CAST(CASE WHEN l_orderkey > 50000 THEN 'x' ELSE '1' END AS INT) AS v "
        f"FROM lineitem) TO 's3://{BUCKET}/failed/' STORED AS PARQUET"
    )
    with _distributed(s3, "sf001", config=SPLIT) as dctx:
        assert dctx.sql(failing).distributed_plan().final.task_count > 1
        with pytest.raises(QueryFailed, match="Cannot cast string 'x'"):
            dctx.sql(failing).collect()
    assert _visible_keys(s3, "failed/") == []
    assert all(key.endswith("/") for key in s3.keys(BUCKET, "failed/"))  # folder markers at most


def test_a_write_to_a_bucket_without_an_s3store_runs_on_one_node(s3):
    copy = (
        f"COPY (SELECT l_orderkey, l_quantity FROM lineitem) TO 's3://{BUCKET}/one-node/' STORED AS PARQUET"
    )
    with DistributedContext(_single_node(s3, "sf001"), config=SPLIT) as dctx:
        df = dctx.sql(copy)
        assert not df.distributed_plan().is_distributed
        assert "was not registered with DistributedContext.register_object_store" in df.explain_string()
        assert df.to_pylist() == [{"count": 60175}]
    assert _visible_keys(s3, "one-node/")  # DataFusion's own files, straight into place
    assert not [key for key in s3.keys(BUCKET, "one-node/") if "/." in key]  # nothing staged


def test_an_insert_into_a_table_in_s3_is_distributed(s3):
    with _distributed(s3, "sf001", config=SPLIT) as dctx:
        dctx.sql(
            f"CREATE EXTERNAL TABLE archive (o_orderkey BIGINT, o_orderstatus VARCHAR) "
            f"STORED AS PARQUET LOCATION 's3://{BUCKET}/archive/'"
        )
        insert = "INSERT INTO archive SELECT o_orderkey, o_orderstatus FROM orders"
        assert dctx.sql(insert).distributed_plan().final.task_count > 1
        assert dctx.sql(insert).to_pylist() == [{"count": 15000}]
        assert dctx.sql(insert).to_pylist() == [{"count": 15000}]  # appends
        counts = dctx.sql("SELECT count(*) AS n, count(DISTINCT o_orderkey) AS keys FROM archive")
        assert counts.to_pylist() == [{"n": 30000, "keys": 15000}]
