"""The `distributed` settings: values read by each field's type, fixed fields refused, SHOW's
rows and what explain() shows."""

from __future__ import annotations

import dataclasses

import pytest

from datafusion_distributed import DistributedConfig
from datafusion_distributed.api.settings import (
    FIXED,
    UnknownSetting,
    changed_settings,
    parse_value,
    setting_names,
    setting_rows,
    with_setting,
)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("partitions_per_task", "4", 4),
        ("bytes_per_partition", "1_048_576", 1048576),
        ("cardinality_factor", "0.5", 0.5),
        ("connect_timeout", "5", 5.0),
        ("query_timeout", "None", None),
        ("query_timeout", "NULL", None),
        ("query_timeout", "12.5", 12.5),
        ("broadcast_total_rows", "none", None),
        ("compression", "zstd", "zstd"),
        ("compression", "null", None),
    ],
)
def test_values_are_read_by_the_field_type(name: str, text: str, expected: object) -> None:
    value = parse_value(name, text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("partitions_per_task", "4.0", "takes an integer"),
        ("partitions_per_task", "none", "takes an integer"),  # not optional
        ("task_timeout", "soon", "takes a number"),
        ("task_timeout", "inf", "takes a finite number"),
    ],
)
def test_bad_values_name_the_setting(name: str, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"distributed.{name} {message}"):
        parse_value(name, text)


def test_a_new_value_is_checked_as_a_new_config_is() -> None:
    config = DistributedConfig()
    assert with_setting(config, "partitions_per_task", "4").partitions_per_task == 4
    assert config.partitions_per_task == 2  # frozen: a new config, the old one unchanged
    with pytest.raises(ValueError, match="partitions_per_task must be at least 1, got 0"):
        with_setting(config, "partitions_per_task", "0")
    with pytest.raises(ValueError, match="compression must be"):
        with_setting(config, "compression", "gzip")


def test_unknown_names_suggest_the_nearest_or_list_the_known_ones() -> None:
    with pytest.raises(UnknownSetting, match=r"did you mean distributed\.partitions_per_task\?"):
        with_setting(DistributedConfig(), "partitons_per_task", "4")
    with pytest.raises(UnknownSetting, match="distributed.partitions_per_task") as info:
        with_setting(DistributedConfig(), "xyzzy", "4")
    assert all(name in str(info.value) for name in setting_names())


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_settings_say_why_and_how(name: str) -> None:
    with pytest.raises(ValueError, match=rf"cannot be changed by SQL: .*DistributedConfig\({name}=\.\.\.\)"):
        with_setting(DistributedConfig(), name, "x")


def test_every_field_has_a_row_and_the_token_is_never_shown() -> None:
    config = DistributedConfig(auth_token="s3cret", query_timeout=None)
    rows = setting_rows(config, token_in_use=True)
    assert rows["name"] == setting_names()
    assert len(rows["name"]) == len(dataclasses.fields(DistributedConfig))
    shown = dict(zip(rows["name"], rows["value"], strict=True))
    assert shown["distributed.auth_token"] == "set"
    assert "s3cret" not in repr(rows)
    assert shown["distributed.query_timeout"] is None
    assert shown["distributed.partitions_per_task"] == "2"
    assert setting_rows(config, False, "auth_token") == {
        "name": ["distributed.auth_token"],
        "value": ["unset"],
    }


def test_changed_settings_are_those_off_their_defaults() -> None:
    assert changed_settings(DistributedConfig()) == ()
    # fixed and secret fields are never part of what a plan shows
    config = DistributedConfig(partitions_per_task=4, query_timeout=30, auth_token="x", embedded_workers=3)
    assert changed_settings(config) == ("partitions_per_task=4", "query_timeout=30")
