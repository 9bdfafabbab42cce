"""DistributedConfig: checked when made, and the DataFusion settings a query is planned with."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext

MiB = 1024 * 1024

INVALID = {
    "partitions_per_task": 0,
    "bytes_per_partition": 0,
    "cardinality_factor": 0.0,
    "max_tasks_per_stage": -1,
    "broadcast_inline_bytes": -1,
    "broadcast_total_rows": -1,
    "broadcast_total_bytes": -1,
    "broadcast_row_bytes": 0,
    "embedded_workers": 0,
    "compression": "gzip",
    "connect_timeout": 0.0,
    "task_timeout": -1.0,
    "liveness_timeout": 0.0,
    "task_attempts": 0,
    "query_timeout": 0.0,
    "speculation_factor": 0.5,
    "speculation_min_seconds": -1.0,
    "worker_refresh_seconds": -1.0,
    "dashboard_port": 70000,
    "dashboard_host": "",
    "history_length": 0,
}


@pytest.mark.parametrize(("name", "value"), INVALID.items(), ids=INVALID)
def test_an_invalid_setting_fails_when_the_config_is_made(name, value):
    with pytest.raises(ValueError, match=f"^{name} must be "):
        DistributedConfig(**{name: value})


WRONG_TYPES = {
    "partitions_per_task": ("4", "an integer"),
    "max_tasks_per_stage": (2.5, "an integer"),
    "cardinality_factor": ("1.0", "a number"),
    "adaptive": (1, "True or False"),
    "query_timeout": ("10", r"a number \(or None\)"),
    "compression": (4, r"a string \(or None\)"),
    "bytes_per_partition": ("lots", "a byte count such as 1048576 or 64MiB"),
    "liveness_timeout": (True, "a number"),
}


@pytest.mark.parametrize(
    ("name", "value", "rule"), [(n, *v) for n, v in WRONG_TYPES.items()], ids=WRONG_TYPES
)
def test_a_value_of_another_type_is_refused_naming_the_setting(name, value, rule):
    """Once `TypeError: '>=' not supported between 'str' and 'int'`, naming no setting, or
    (2.5 tasks) accepted."""
    with pytest.raises(ValueError, match=f"^{name} must be {rule}, got {value!r}$"):
        DistributedConfig(**{name: value})


def test_numpy_numbers_are_numbers():
    numpy = pytest.importorskip("numpy")
    config = DistributedConfig(partitions_per_task=numpy.int64(3), skew_factor=numpy.float32(2))
    assert config.partitions_per_task == 3


def test_byte_sizes_read_the_same_in_python_sql_and_on_the_command_line():
    from datafusion_distributed.api.settings import parse_value
    from datafusion_distributed.cli.settings import parse_bytes

    assert DistributedConfig(bytes_per_partition="64MiB").bytes_per_partition == 64 * MiB
    assert DistributedConfig(memory_table_inline_bytes="1.5k").memory_table_inline_bytes == 1536
    assert parse_value("bytes_per_partition", "64MiB") == parse_bytes("64MiB") == 64 * MiB
    ctx = SessionContext()
    with DistributedContext(ctx) as dctx:
        dctx.sql("SET distributed.skew_min_bytes = '2GiB'")
        assert dctx.config.skew_min_bytes == 2 << 30


def test_an_unknown_name_suggests_the_nearest_setting():
    with pytest.raises(
        TypeError, match=r"^unknown setting partitons_per_task; did you mean partitions_per_task\?$"
    ):
        DistributedConfig(partitons_per_task=4)
    with pytest.raises(TypeError, match="the settings are: adaptive, "):
        DistributedConfig(xyzzy=1)


def test_defaults_are_the_documented_ones():
    assert repr(DistributedConfig()) == (
        "DistributedConfig(partitions_per_task=2, bytes_per_partition=16777216, cardinality_factor=1.0, "
        "max_tasks_per_stage=0, broadcast_inline_bytes=8388608, broadcast_total_rows=4000000, "
        "broadcast_total_bytes=134217728, broadcast_row_bytes=64, memory_table_inline_bytes=1048576, adaptive=True, "
        "adaptive_one_task_bytes=4194304, adaptive_task_bytes=33554432, skew_factor=2.0, skew_min_bytes=16777216, "
        "embedded_workers=2, "
        "compression='auto', exchange='auto', connect_timeout=30.0, "
        "task_timeout=600.0, liveness_timeout=10.0, task_attempts=3, query_timeout=None, "
        "tls_root_certs=None, tls_client_cert=None, tls_client_key=None, feed_host='127.0.0.1', "
        "speculation=False, speculation_factor=2.0, speculation_min_seconds=1.0, "
        "worker_refresh_seconds=1.0, dashboard_port=None, dashboard_host='127.0.0.1', history_length=100, "
        "check_workers='require')"
    )


def test_the_planner_gets_the_planning_settings():
    config = DistributedConfig(partitions_per_task=3, bytes_per_partition=MiB, max_tasks_per_stage=2)
    planner = config.planner(4)
    assert (planner.workers, planner.partitions_per_task, planner.bytes_per_partition) == (4, 3, MiB)
    assert (planner.target_partitions, planner.task_cap) == (12, 2)


def planned_with(target_partitions: int, join_rows: int, join_bytes: int) -> dict[str, str]:
    return {
        "datafusion.execution.target_partitions": str(target_partitions),
        "datafusion.optimizer.hash_join_single_partition_threshold_rows": str(join_rows),
        "datafusion.optimizer.hash_join_single_partition_threshold": str(join_bytes),
    }


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        # 128 MiB at 64 bytes a row: 2097152 rows over the cluster, under the 4000000 cap
        (1, planned_with(2, 2_097_152, 128 * MiB)),
        (2, planned_with(4, 1_048_576, 64 * MiB)),
        (3, planned_with(6, 699_050, 128 * MiB // 3)),
    ],
)
def test_planning_settings_divide_the_broadcast_budget_by_the_workers(workers, expected):
    assert DistributedConfig().planner(workers).datafusion_settings() == expected


def test_the_row_threshold_is_the_byte_budget_at_the_row_size_capped_by_the_total_rows():
    wide_rows = DistributedConfig(broadcast_total_bytes=64 * MiB, broadcast_row_bytes=1024)
    assert wide_rows.planner(2).broadcast_thresholds() == (32_768, 32 * MiB)
    narrow_rows = DistributedConfig(broadcast_total_rows=1_000_000, broadcast_row_bytes=1)
    assert narrow_rows.planner(2).broadcast_thresholds() == (500_000, 64 * MiB)
    assert DistributedConfig(broadcast_total_rows=None).planner(2).broadcast_thresholds() is None


@pytest.mark.parametrize("workers", [1, 3])
def test_without_broadcast_totals_only_the_target_partitions_are_set(workers):
    settings = DistributedConfig(broadcast_total_rows=None).planner(workers).datafusion_settings()
    assert settings == {"datafusion.execution.target_partitions": str(2 * workers)}


def test_the_planning_session_has_the_planning_settings_and_the_users_context_keeps_its_own():
    ctx = SessionContext()
    workers = [f"grpc://10.0.0.{i}:50051" for i in range(1, 4)]  # planning only: nothing connects
    with DistributedContext(ctx, workers=workers) as dctx:
        session = dctx.planning_session(3)
        for name, value in DistributedConfig().planner(3).datafusion_settings().items():
            shown = session.sql(f"SHOW {name}").to_pylist()[0]["value"]
            assert shown == value
            assert ctx.sql(f"SHOW {name}").to_pylist()[0]["value"] != value
