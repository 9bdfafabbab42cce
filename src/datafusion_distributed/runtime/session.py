"""The SessionContext a task runs in."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext

from .extensions import Extension, install

# Settings every task needs whatever the user's hook does: exchange inputs are read one file
# group per partition, and DataFusion's work stealing would move files between partitions.
REQUIRED_SETTINGS = {"datafusion.execution.enable_file_stream_work_stealing": "false"}

SessionBuilder = Callable[..., SessionContext]


def default_session(config: SessionConfig, runtime: RuntimeEnvBuilder | None = None) -> SessionContext:
    """A plain SessionContext: what a task runs in when the user gives no session hook."""
    return SessionContext(config, runtime)


def accepts_runtime(builder: SessionBuilder) -> bool:
    """Whether a session hook takes the `runtime` keyword (needed to apply a memory limit)."""
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        return False
    return "runtime" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def memory_limited_runtime(memory_limit_bytes: int) -> RuntimeEnvBuilder:
    """A runtime whose memory pool holds at most `memory_limit_bytes`, shared fairly by the
    operators of a task; operators that can spill (sorts, aggregations) spill to disk first."""
    return RuntimeEnvBuilder().with_fair_spill_pool(memory_limit_bytes)


def task_session(
    builder: SessionBuilder | None = None,
    memory_limit_bytes: int | None = None,
    extensions: Sequence[Extension] = (),
) -> SessionContext:
    """A SessionContext for running task plans, built by the user's hook if given, with the
    user's `extensions` installed (see `runtime.extensions`).

    The hook receives a SessionConfig with the required settings already applied and returns
    the SessionContext to use (register object stores, UDFs or more config there). With a
    memory limit the hook must accept a `runtime` keyword (a RuntimeEnvBuilder) and pass it on:
    `SessionContext(config, runtime)`.
    """
    return install(_built_session(builder, memory_limit_bytes), extensions)


def _built_session(builder: SessionBuilder | None, memory_limit_bytes: int | None) -> SessionContext:
    config = SessionConfig()
    for key, value in REQUIRED_SETTINGS.items():
        config = config.set(key, value)
    if memory_limit_bytes is None:
        return (builder or default_session)(config)
    runtime = memory_limited_runtime(memory_limit_bytes)
    if builder is None:
        return default_session(config, runtime)
    if not accepts_runtime(builder):
        raise ValueError("a memory limit needs a session hook that accepts a `runtime` keyword argument")
    return builder(config, runtime=runtime)
