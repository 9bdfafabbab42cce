"""Streamed exchanges, the Python side of the compiled data plane (`datafusion_distributed._native`).

A producer task whose output streams runs under an `ExchangeSinkExec`: each of its output
partitions sends its batches into a channel of this process, and Python only waits for every
partition to say what it sent (one row each, never a batch). A consumer task reads such an input
through a `StreamExchangeExec` leaf spliced where the input's marker is, whose partitions yield
the channels' batches as they come: from this process, or from another worker's data-plane
server (`serve`). Both nodes travel in plan bytes through the data plane's codec, installed on
every session that decodes task plans (`with_exchange_codec`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

import datafusion_distributed._native as _native


class _ProducerAttempt(Protocol):
    """One attempt of a producer task."""

    @property
    def stage(self) -> int:
        """The producer's stage."""
        ...

    @property
    def task(self) -> int:
        """The producer's task."""
        ...

    @property
    def attempt(self) -> int:
        """The producer task's attempt."""
        ...


class Attempt(_ProducerAttempt, Protocol):
    """One attempt of a task of a query (a `protocol.messages.TaskKey`)."""

    @property
    def query_id(self) -> str:
        """The query."""
        ...


class Channel(_ProducerAttempt, Protocol):
    """One streamed output partition of a producer attempt (a `protocol.messages.StreamChannel`)."""

    @property
    def address(self) -> str:
        """Where its worker's data plane serves it ("" for this process)."""
        ...

    @property
    def partition(self) -> int:
        """The producer's output partition."""
        ...


CODEC_ID: str = _native.CODEC_ID
RELEASED = "was released while"  # in the error of a sink or source whose query was released
_CODEC = _native.ExchangeCodec()
# id(ctx) -> (ctx, ctx with the codec), for the newest contexts: each entry keeps its `ctx`
# alive, so the id is not reused meanwhile; the sessions tasks run in are few and long-lived
_with_codec: OrderedDict[int, tuple[SessionContext, SessionContext]] = OrderedDict()
_with_codec_lock = threading.Lock()
CODEC_CONTEXTS_KEPT = 64


def with_exchange_codec(ctx: SessionContext) -> SessionContext:
    """`ctx` able to decode and run the exchange nodes: a context carrying the data plane's
    codec beside those `ctx` has (made once per context, then reused)."""
    if CODEC_ID in ctx.physical_extension_codec_ids():
        return ctx
    with _with_codec_lock:
        known = _with_codec.get(id(ctx))
        if known is not None and known[0] is ctx:
            _with_codec.move_to_end(id(ctx))
            return known[1]
        made = ctx.with_physical_extension_codec(_CODEC)
        _with_codec[id(ctx)] = (ctx, made)
        while len(_with_codec) > CODEC_CONTEXTS_KEPT:
            _with_codec.popitem(last=False)
        return made


def source_leaf(query_id: str, schema: bytes, partitions: Sequence[Sequence[Channel]]) -> bytes:
    """Plan bytes of a leaf whose partition k yields the batches of `partitions[k]`, declaring
    `schema` (from `declared_schema`)."""
    channels = [
        [(c.address, query_id, c.stage, c.task, c.attempt, c.partition) for c in group]
        for group in partitions
    ]
    return _native.source_plan_with_schema(schema, channels)


def declared_schema(ctx: SessionContext, subtree: bytes) -> bytes:
    """The schema DataFusion plans for the output of the plan `subtree` (decoded in `ctx`), as
    a streamed input's leaf declares it in its place: the leaf is decoded over the subtree,
    then encoded again, which writes the subtree's schema into it."""
    decoder = with_exchange_codec(ctx)
    leaf = ExecutionPlan.from_bytes(decoder, _native.source_plan(subtree, []))
    return _native.inline_schema(leaf.to_bytes(decoder))


def sink_plan(plan: bytes, key: Attempt) -> bytes:
    """The plan bytes `plan` under a sink streaming each of its partitions into the channels of
    attempt `key`."""
    return _native.sink_plan(plan, key.query_id, key.stage, key.task, key.attempt)


_serving: dict[tuple[str, int], int] = {}  # (host, port asked) -> the port it is served on
_serving_lock = threading.Lock()


def serve(host: str, token: str, port: int = 0) -> int:
    """Serve this process's channels to readers in other processes on `host` and `port` (0: a
    free one; once per host and port asked); requests must carry `token`, the cluster's.
    Returns the port."""
    with _serving_lock:
        _native.set_token(token)
        if (host, port) not in _serving:
            _serving[host, port] = _native.serve(host, port)
        return _serving[host, port]


def trust_peer(address: str, token: str) -> None:
    """Send `token` to the data plane at `address`: another cluster's, whose streams this
    process reads (a coordinator reading its workers'), where its own token may differ."""
    _native.set_peer_token(address, token)


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
