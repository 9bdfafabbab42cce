"""The SessionContext a task runs in."""

from __future__ import annotations

from collections.abc import Callable

from datafusion import SessionConfig, SessionContext

# Settings every task needs whatever the user's hook does: exchange inputs are read one file
# group per partition, and DataFusion's work stealing would move files between partitions.
REQUIRED_SETTINGS = {"datafusion.execution.enable_file_stream_work_stealing": "false"}

SessionBuilder = Callable[[SessionConfig], SessionContext]


def default_session(config: SessionConfig) -> SessionContext:
    return SessionContext(config)


def task_session(builder: SessionBuilder | None = None) -> SessionContext:
    """A SessionContext for running task plans, built by the user's hook if given.

    The hook receives a SessionConfig with the required settings already applied and returns
    the SessionContext to use (register object stores, UDFs or more config there).
    """
    config = SessionConfig()
    for key, value in REQUIRED_SETTINGS.items():
        config = config.set(key, value)
    return (builder or default_session)(config)
