"""Recognising the statements of the `distributed` settings namespace, and nothing else."""

from __future__ import annotations

import pytest

from datafusion_distributed.api.settings_statements import (
    MalformedSettingsStatement,
    ResetSetting,
    SetSetting,
    ShowSettings,
    parse_settings_statement,
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SET distributed.partitions_per_task = 4", SetSetting("partitions_per_task", "4", False)),
        ("set DISTRIBUTED.Partitions_Per_Task=4;", SetSetting("partitions_per_task", "4", False)),
        ("  SET  distributed.compression  TO  zstd ;  ", SetSetting("compression", "zstd", False)),
        ("SET distributed.compression = 'lz4'", SetSetting("compression", "lz4", True)),
        ("SET distributed.compression = 'it''s'", SetSetting("compression", "it's", True)),
        ('SET distributed.compression = "zstd"', SetSetting("compression", "zstd", True)),
        ("-- why\nSET distributed.query_timeout = null", SetSetting("query_timeout", "null", False)),
        (
            "/* a\nb */ SET distributed.query_timeout = 2.5 -- seconds",
            SetSetting("query_timeout", "2.5", False),
        ),
        ("SHOW distributed.task_attempts", ShowSettings("task_attempts")),
        ("show distributed;", ShowSettings(None)),
        ("SHOW distributed.*", ShowSettings(None)),
        ("RESET distributed.partitions_per_task;", ResetSetting("partitions_per_task")),
    ],
)
def test_statements_are_recognised(query: str, expected: object) -> None:
    assert parse_settings_statement(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "SELECT 'SET distributed.partitions_per_task = 4'",
        "SELECT 1 -- SET distributed.partitions_per_task = 4",
        "SET datafusion.execution.batch_size = 100",
        "SHOW datafusion.execution.batch_size",
        "SHOW ALL",
        "SELECT * FROM distributed",
        "SHOW distributed_tables",
        "INSERT INTO t VALUES ('SHOW distributed')",
    ],
)
def test_other_sql_is_left_alone(query: str) -> None:
    assert parse_settings_statement(query) is None


@pytest.mark.parametrize(
    ("query", "form"),
    [
        ("SET distributed.partitions_per_task 4", "SET distributed.<name> = <value>"),
        ("SET distributed.partitions_per_task = 4; SELECT 1", "SET distributed.<name> = <value>"),
        ("SET distributed.x = 'unterminated", "SET distributed.<name> = <value>"),
        ("SHOW distributed.a.b", "SHOW distributed.<name>"),
        ("RESET distributed", "RESET distributed.<name>"),
    ],
)
def test_malformed_statements_show_the_form(query: str, form: str) -> None:
    with pytest.raises(MalformedSettingsStatement, match=form.replace(".", r"\.")):
        parse_settings_statement(query)
