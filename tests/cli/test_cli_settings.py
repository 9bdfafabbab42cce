"""The `sql` command's flags for DistributedConfig: one per setting (or a reason for none), each
turned into the setting's value, and a bad value refused naming its flag."""

from __future__ import annotations

import dataclasses

import pytest

from datafusion_distributed import DistributedConfig
from datafusion_distributed.cli import build_parser
from datafusion_distributed.cli.settings import WITHOUT_FLAG, config_from_args, flag_of, parse_bytes


def config_of(*flags: str) -> DistributedConfig:
    return config_from_args(build_parser().parse_args(["sql", "SELECT 1", *flags]))


def test_every_setting_has_a_flag_or_a_reason_for_none():
    sql = build_parser()._subparsers._group_actions[0].choices["sql"]
    flags = {option for action in sql._actions for option in action.option_strings}
    for field in dataclasses.fields(DistributedConfig):
        assert (flag_of(field.name) in flags) != (field.name in WITHOUT_FLAG), field.name
    assert "--auth-token" not in flags  # a token on a command line is visible to every user


def test_every_flag_has_the_help_of_its_setting():
    help_text = " ".join(_sql_help().split())
    assert (
        "--partitions-per-task N partitions (threads) each task runs on its worker (default: 2)" in help_text
    )
    assert "--bytes-per-partition BYTES scanned bytes" in help_text and "(default: 16MiB)" in help_text
    assert "--query-timeout SECONDS seconds a query may run before it is cancelled" in help_text


def _sql_help() -> str:
    sql = build_parser()._subparsers._group_actions[0].choices["sql"]
    return sql.format_help()


def test_flags_become_settings_and_the_rest_keep_their_defaults():
    config = config_of(
        "--partitions-per-task", "4", "--bytes-per-partition", "64MiB", "--broadcast-total-rows", "none",
        "--compression", "none", "--query-timeout", "2.5", "--task-attempts", "1", "--embedded-workers", "3",
    )  # fmt: skip
    assert (config.partitions_per_task, config.bytes_per_partition) == (4, 64 * 1024 * 1024)
    assert (config.broadcast_total_rows, config.compression, config.query_timeout) == (None, None, 2.5)
    assert (config.task_attempts, config.embedded_workers) == (1, 3)
    assert config.task_timeout == DistributedConfig().task_timeout
    assert config_of() == DistributedConfig()


def test_a_setting_out_of_range_is_refused_naming_its_flag():
    with pytest.raises(
        SystemExit, match=r"partitions_per_task must be at least 1, got 0 \(--partitions-per-task\)"
    ):
        config_of("--partitions-per-task", "0")
    with pytest.raises(SystemExit, match=r"compression must be .* got 'gzip' \(--compression\)"):
        config_of("--compression", "gzip")


def test_a_value_of_the_wrong_type_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        config_of("--bytes-per-partition", "lots")
    assert "argument --bytes-per-partition: not a byte count: 'lots'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        config_of("--task-attempts", "two")
    assert "argument --task-attempts: 'two' is not a whole number" in capsys.readouterr().err


def test_byte_counts_take_binary_units():
    assert [parse_bytes(t) for t in ["100", "2k", "2KiB", "1.5MiB", "64mb", "1G"]] == [
        100, 2048, 2048, 1572864, 64 << 20, 1 << 30,
    ]  # fmt: skip
