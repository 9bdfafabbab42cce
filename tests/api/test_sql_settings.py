"""`dctx.sql` as DataFusion's `SessionContext.sql` (options, parameters) and the `distributed`
settings namespace end to end: SET changes the next query's plan, answers stay single-node's."""

from __future__ import annotations

import pytest
from datafusion import SQLOptions

from datafusion_distributed import DistributedConfig, DistributedContext, QueryFailed
from datafusion_distributed.api import settings
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed

CONFIG = DistributedConfig(bytes_per_partition=1024)
QUERY = (
    "SELECT l_returnflag, count(*) AS n, sum(l_quantity) AS q FROM lineitem "
    "GROUP BY l_returnflag ORDER BY l_returnflag"
)


@pytest.fixture
def dctx(tpch_sf001, distributed_tpch):
    with distributed_tpch(tpch_sf001, config=CONFIG) as d:
        yield d


def stage_partitions(dctx: DistributedContext, query: str) -> list[int]:
    """The shuffle partitions each stage of `query` reads or writes, as explain() shows them."""
    text = dctx.sql(query).explain_string()
    return [int(line.split("partitions=")[1].split()[0]) for line in text.splitlines() if "── tasks=" in line]


def test_set_changes_the_next_plan_and_the_answer_stays_single_nodes(dctx, single_node_sf001) -> None:
    expected = single_node_sf001.sql(QUERY).to_arrow_table()
    before = dctx.sql(QUERY).explain_string()
    assert not before.startswith("settings:") or "partitions_per_task" not in before.splitlines()[0]
    assert "Hash([l_returnflag@0], 4)" in before  # 2 workers x 2 partitions per task

    assert dctx.sql("SET distributed.partitions_per_task = 4").to_pylist() == []
    assert dctx.config.partitions_per_task == 4
    after = dctx.sql(QUERY).explain_string()
    assert after.splitlines()[0] == "settings: partitions_per_task=4, bytes_per_partition=1024"
    assert "Hash([l_returnflag@0], 8)" in after
    assert max(stage_partitions(dctx, QUERY)) == 8
    assert_tables_equal(dctx.sql(QUERY).to_arrow_table(), expected)
    assert_ran_distributed(dctx)

    dctx.sql("RESET distributed.partitions_per_task")
    assert dctx.config == CONFIG
    assert "Hash([l_returnflag@0], 4)" in dctx.sql(QUERY).explain_string()
    assert_tables_equal(dctx.sql(QUERY).to_arrow_table(), expected)
    assert_ran_distributed(dctx)


def test_show_lists_the_settings_sorted_without_the_token(dctx) -> None:
    dctx.sql("SET distributed.query_timeout = 120")
    rows = dctx.sql("SHOW distributed").to_pylist()
    names = [row["name"] for row in rows]
    assert names == sorted(names) and len(names) == len(settings.setting_names())
    shown = {row["name"]: row["value"] for row in rows}
    assert shown["distributed.query_timeout"] == "120.0"
    assert shown["distributed.auth_token"] == "set"  # the embedded cluster's own token, never shown
    assert dctx.clients.settings.auth_token not in repr(rows)
    one = dctx.sql("show distributed.query_timeout;").to_arrow_table()
    assert one.column_names == ["name", "value"]
    assert one.to_pylist() == [{"name": "distributed.query_timeout", "value": "120.0"}]


def test_refusals_are_clear_and_change_nothing(dctx) -> None:
    for query, message in [
        ("SET distributed.partition_per_task = 4", "unknown setting distributed.partition_per_task"),
        ("SET distributed.embedded_workers = 4", "cannot be changed by SQL: the embedded cluster"),
        ("SET distributed.tls_root_certs = 'ca.pem'", r"DistributedConfig\(tls_root_certs=\.\.\.\)"),
        ("SET distributed.partitions_per_task = 0", "partitions_per_task must be at least 1"),
        ("SET distributed.task_attempts = many", "takes an integer"),
        ("SET distributed.task_attempts", r"SET distributed\.<name> = <value>"),
        ("RESET distributed.auth_token", "cannot be changed by SQL"),
        ("SHOW distributed.nothing", "unknown setting"),
    ]:
        with pytest.raises(QueryFailed, match=message) as info:
            dctx.sql(query)
        assert isinstance(info.value, ValueError)
    assert dctx.config == CONFIG


def test_options_forbidding_statements_refuse_set_but_not_show(dctx) -> None:
    no_statements = SQLOptions().with_allow_statements(False)
    with pytest.raises(QueryFailed, match="Statement not supported"):
        dctx.sql("SET distributed.partitions_per_task = 4", no_statements)
    assert dctx.config == CONFIG
    assert dctx.sql("SHOW distributed.partitions_per_task", no_statements).to_pylist()[0]["value"] == "2"
    dctx.sql("SET distributed.partitions_per_task = 4", SQLOptions())
    assert dctx.config.partitions_per_task == 4
    with pytest.raises(QueryFailed, match="DDL not supported"):
        dctx.sql("CREATE TABLE t AS SELECT 1", SQLOptions().with_allow_ddl(False))


def test_runtime_settings_take_effect_where_they_are_held(dctx, single_node_sf001) -> None:
    dctx.sql("SET distributed.connect_timeout = 7")
    dctx.sql("SET distributed.task_timeout = 70")
    dctx.sql("SET distributed.liveness_timeout = 2")
    dctx.sql("SET distributed.compression = zstd")
    dctx.sql("SET distributed.task_attempts = 1")
    assert (dctx.clients.settings.timeout, dctx.clients.settings.task_timeout) == (7.0, 70.0)
    assert (dctx.liveness.timeout, dctx.liveness.interval) == (2.0, 0.5)
    assert dctx.exchange_compression() == "zstd"
    assert_tables_equal(dctx.sql(QUERY).to_arrow_table(), single_node_sf001.sql(QUERY).to_arrow_table())
    assert_ran_distributed(dctx)
    # the connections opened by that query follow a later change too
    dctx.sql("SET distributed.task_timeout = 80")
    assert {client.settings.task_timeout for client in dctx.clients._clients.values()} == {80.0}


def test_named_parameters_substitute_a_setting_value(dctx) -> None:
    dctx.sql("SET distributed.partitions_per_task = $n", n=3)
    assert dctx.config.partitions_per_task == 3


def test_datafusion_settings_still_go_to_datafusion_and_shape_plans(dctx, single_node_sf001) -> None:
    query = "SELECT count(*) AS n FROM orders JOIN customer ON o_custkey = c_custkey"
    assert "mode=CollectLeft" in dctx.sql(query).explain_string()
    dctx.sql("SET distributed.broadcast_total_rows = none")
    dctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0")
    dctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold = 0")
    assert (
        dctx.sql("SHOW datafusion.optimizer.hash_join_single_partition_threshold").to_pylist()[0]["value"]
        == "0"
    )
    assert "mode=Partitioned" in dctx.sql(query).explain_string()
    assert dctx.sql(query).to_pylist() == single_node_sf001.sql(query).to_pylist()


@pytest.mark.parametrize(
    ("query", "kwargs"),
    [
        ("SELECT count(*) AS n FROM lineitem WHERE l_quantity > $1", {"param_values": {"1": 30}}),
        ("SELECT count(*) AS n FROM lineitem WHERE l_quantity > $q", {"param_values": {"q": 30.5}}),
        ("SELECT l_returnflag, count(*) AS n FROM $t GROUP BY l_returnflag ORDER BY 1", {"t": "lineitem"}),
    ],
)
def test_parameters_as_datafusion_takes_them(dctx, single_node_sf001, query, kwargs) -> None:
    assert_tables_equal(
        dctx.sql(query, **kwargs).to_arrow_table(), single_node_sf001.sql(query, **kwargs).to_arrow_table()
    )
    assert_ran_distributed(dctx)


def test_a_distributed_frame_as_a_named_table(dctx, single_node_sf001) -> None:
    query = "SELECT o_orderpriority, count(*) AS n FROM $big GROUP BY o_orderpriority ORDER BY 1"
    big = dctx.sql("SELECT * FROM orders WHERE o_totalprice > 100000")
    expected = single_node_sf001.sql(
        query, big=single_node_sf001.sql("SELECT * FROM orders WHERE o_totalprice > 100000")
    )
    result = dctx.sql(query, big=big)
    assert_tables_equal(result.to_arrow_table(), expected.to_arrow_table())
    assert_ran_distributed(dctx)
    assert result.distributed_plan().is_distributed


def test_explain_analyze_takes_parameters(dctx) -> None:
    text = dctx.sql(
        "EXPLAIN ANALYZE SELECT count(*) FROM lineitem WHERE l_quantity > $1", param_values={"1": 30}
    ).to_pylist()
    assert "metrics:" in text[0]["plan"]


def test_a_bad_parameter_is_a_query_failure(dctx) -> None:
    with pytest.raises(QueryFailed):
        dctx.sql("SELECT $1 + $2 AS x", param_values={"1": 1})


def test_graph_drawings_carry_the_settings(dctx) -> None:
    dctx.sql("SET distributed.partitions_per_task = 3")
    assert "// settings: partitions_per_task=3" in dctx.sql(QUERY).explain_string(format="graphviz")
    assert "%% settings: partitions_per_task=3" in dctx.sql(QUERY).explain_string(format="mermaid")
