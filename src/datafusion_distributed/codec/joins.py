"""A partitioned hash join turned, in bytes, into one that collects its left side whole.

A `Partitioned` HashJoinExec joins partition i of its left side with partition i of its right,
both hash partitioned on the keys by a repartition below each. Collecting the left side whole
(`CollectLeft`, what DataFusion plans for a small build side) lets the right side be read in
any partitioning: its repartition can go. Three edits make it, each on fields pinned in
`fields`: the join's mode (`collect_left`), a CoalescePartitionsExec over its left input
(`coalesced`: CollectLeft reads one partition), and a repartition replaced by its input
(`repartition_input`).
"""

from __future__ import annotations

from .children import node_message
from .fields import (
    COALESCE_PARTITIONS,
    COALESCE_PARTITIONS_INPUT,
    HASH_JOIN,
    HASH_JOIN_PARTITION_MODE,
    REPARTITION,
    REPARTITION_INPUT,
)
from .wire import LEN, WireError, encode_len_field, iter_fields


def collect_left(join: bytes) -> bytes:
    """The HashJoinExec `join` in CollectLeft mode, all else as it was."""
    message = node_message(join, HASH_JOIN)
    kept = b"".join(
        message[f.start : f.end] for f in iter_fields(message) if f.number != HASH_JOIN_PARTITION_MODE
    )
    return encode_len_field(HASH_JOIN, kept)


def coalesced(subtree: bytes) -> bytes:
    """A CoalescePartitionsExec over the plan `subtree`: its partitions read as one."""
    return encode_len_field(COALESCE_PARTITIONS, encode_len_field(COALESCE_PARTITIONS_INPUT, subtree))


def repartition_input(repartition: bytes) -> bytes:
    """The input of the RepartitionExec `repartition`."""
    message = node_message(repartition, REPARTITION)
    inputs = [f for f in iter_fields(message) if f.number == REPARTITION_INPUT and f.wire_type == LEN]
    if len(inputs) != 1:
        raise WireError("a RepartitionExec without one input")
    return inputs[0].payload(message)
