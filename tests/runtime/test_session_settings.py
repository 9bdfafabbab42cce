"""Which of the user's settings travel with tasks, and the sessions tasks carrying them run in."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datafusion import SessionConfig, SessionContext

from datafusion_distributed.runtime.session import memory_limited_runtime, task_session
from datafusion_distributed.runtime.session_settings import (
    TaskSessions,
    check_task_settings,
    context_settings,
    travelling_settings,
    with_settings,
)

ZONE = ("datafusion.execution.time_zone", "+05:00")


def test_a_default_context_carries_nothing():
    assert travelling_settings(SessionContext()) == ()
    assert travelling_settings(task_session()) == ()  # the library's own task settings stay home


def test_changed_execution_settings_travel_and_the_others_stay():
    ctx = SessionContext()
    for statement in (
        "SET datafusion.execution.time_zone = '+05:00'",
        "SET datafusion.execution.batch_size = 100",
        "SET datafusion.execution.parquet.pushdown_filters = true",
        "SET datafusion.execution.target_partitions = 3",  # the library's: the plan holds it
        "SET datafusion.optimizer.max_passes = 1",  # planning only
        "SET datafusion.format.null = 'null'",  # display only
    ):
        ctx.sql(statement)
    assert travelling_settings(ctx) == (
        ("datafusion.execution.batch_size", "100"),
        ("datafusion.execution.parquet.pushdown_filters", "true"),
        ZONE,
    )
    assert context_settings(ctx)["datafusion.format.null"] == "null"


def test_a_value_with_quotes_and_brackets_survives_the_copy():
    ctx = SessionContext()
    ctx.sql("SET datafusion.execution.parquet.created_by = 'it''s [ours]'")
    settings = travelling_settings(ctx)
    assert settings == (("datafusion.execution.parquet.created_by", "it's [ours]"),)
    assert travelling_settings(with_settings(SessionContext(), settings)) == settings


def test_the_copy_leaves_the_base_as_it_was():
    base = task_session()
    derived = with_settings(base, (ZONE,))
    assert context_settings(derived)[ZONE[0]] == ZONE[1]
    assert ZONE[0] not in context_settings(base)
    assert context_settings(derived)["datafusion.execution.enable_file_stream_work_stealing"] == "false"


@pytest.mark.parametrize(
    "name", ["datafusion.runtime.memory_limit", "datafusion.sql_parser.dialect", "datafusion.execution.nope"]
)
def test_settings_outside_the_travelling_ones_are_refused(name):
    with pytest.raises(ValueError, match=name):
        check_task_settings(((name, "1"),))


def test_copies_share_the_memory_pool_of_their_base():
    """A worker's memory limit bounds the tasks whatever settings they carry."""
    # One partition: a single consumer of the pool (DataFusion 55 was seen hanging, once, with
    # several partitions' aggregations spilling into a pool this small).
    base = SessionContext(SessionConfig().with_target_partitions(1), memory_limited_runtime(200_000))
    batches = [pa.record_batch({"k": list(range(200_000))})]
    query = "SELECT k, count(*) FROM t GROUP BY k ORDER BY k DESC LIMIT 1"
    base.register_record_batches("t", [batches])
    for ctx in (base, with_settings(base, (ZONE,))):  # the copy shares the base's tables too
        with pytest.raises(Exception, match="Resources exhausted"):
            ctx.sql(query).collect()
    roomy = SessionContext()
    roomy.register_record_batches("t", [batches])
    assert roomy.sql(query).to_pylist()  # the query itself is fine without the limit


def test_task_sessions_keep_one_copy_per_settings_the_most_recent_ones():
    built = []

    def build() -> SessionContext:
        built.append(1)
        return task_session()

    sessions = TaskSessions(build, kept=2)
    base = sessions.session()
    east, west = [(("datafusion.execution.time_zone", zone),) for zone in ("+05:00", "-08:00")]
    assert sessions.session(()) is base and len(built) == 1
    first_east = sessions.session(east)
    assert first_east is not base and sessions.session(east) is first_east
    assert sessions.session(west) is not first_east
    assert context_settings(sessions.session(west))[ZONE[0]] == "-08:00"
    sessions.session((("datafusion.execution.batch_size", "9"),))  # a third: the oldest, east, goes
    assert sessions.session(east) is not first_east
    assert len(built) == 1
