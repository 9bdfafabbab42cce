"""Streamed exchanges, the Python side of the compiled data plane (`datafusion_distributed._native`).

A producer task whose output streams runs under an `ExchangeSinkExec`: each of its output
partitions sends its batches into a channel of this process, and Python only waits for every
partition to say what it sent (one row each, never a batch). A consumer task reads such an input
through a `StreamExchangeExec` leaf spliced where the input's marker is, whose partitions yield
the channels' batches as they come. Both nodes travel in plan bytes through the data plane's
codec, installed on every session that decodes task plans (`with_exchange_codec`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from datafusion import SessionContext

import datafusion_distributed._native as _native


class Attempt(Protocol):
    """One attempt of a task (a `protocol.messages.TaskKey`)."""

    @property
    def query_id(self) -> str: ...  # noqa: D102
    @property
    def stage(self) -> int: ...  # noqa: D102
    @property
    def task(self) -> int: ...  # noqa: D102
    @property
    def attempt(self) -> int: ...  # noqa: D102


class Channel(Protocol):
    """One streamed output partition of a producer attempt (a `protocol.messages.StreamChannel`)."""

    @property
    def address(self) -> str: ...  # noqa: D102
    @property
    def stage(self) -> int: ...  # noqa: D102
    @property
    def task(self) -> int: ...  # noqa: D102
    @property
    def attempt(self) -> int: ...  # noqa: D102
    @property
    def partition(self) -> int: ...  # noqa: D102


CODEC_ID: str = _native.CODEC_ID
_CODEC = _native.ExchangeCodec()
_with_codec: dict[int, tuple[SessionContext, SessionContext]] = {}  # id(ctx) -> (ctx, ctx with the codec)
_with_codec_lock = threading.Lock()


def with_exchange_codec(ctx: SessionContext) -> SessionContext:
    """`ctx` able to decode and run the exchange nodes: a context carrying the data plane's
    codec beside those `ctx` has (made once per context, then reused)."""
    if CODEC_ID in ctx.physical_extension_codec_ids():
        return ctx
    with _with_codec_lock:
        known = _with_codec.get(id(ctx))
        if known is not None and known[0] is ctx:
            return known[1]
        made = ctx.with_physical_extension_codec(_CODEC)
        _with_codec[id(ctx)] = (ctx, made)  # keeps `ctx` alive, so its id is never reused
        return made


def source_leaf(query_id: str, stands_for: bytes, partitions: Sequence[Sequence[Channel]]) -> bytes:
    """Plan bytes of a leaf whose partition k yields the batches of `partitions[k]`, in place of
    the subtree `stands_for` (whose schema it declares)."""
    channels = [
        [(c.address, query_id, c.stage, c.task, c.attempt, c.partition) for c in group]
        for group in partitions
    ]
    return _native.source_plan(stands_for, channels)


def sink_plan(plan: bytes, key: Attempt) -> bytes:
    """The plan bytes `plan` under a sink streaming each of its partitions into the channels of
    attempt `key`."""
    return _native.sink_plan(plan, key.query_id, key.stage, key.task, key.attempt)


def release(query_id: str) -> None:
    """Drop the channels of a query in this process and stop its streaming tasks here; channels
    it asks for later are refused (its late tasks fail instead of waiting)."""
    _native.release(query_id)


def close_stage(query_id: str, stage: int) -> None:
    """Stage `stage` of a query has no reader any more: its sinks in this process stop sending
    (partitions nobody read end as read)."""
    _native.close_stage(query_id, stage)


def open_channels() -> int:
    """Channels of this process with an end not yet taken (a finished query leaves none)."""
    return int(_native.open_channels())
