"""Wrapping subtrees of a serialised plan in DataFusion's CooperativeExec.

A CooperativeExec passes its child's batches through unchanged, but spends the tokio task's
budget on each: after so many batches in one poll, the task yields to the scheduler. Work
that never yields (a join emitting millions of rows into an aggregation in one poll) cannot
be aborted; wrapped, it can, at its next yield.
"""

from __future__ import annotations

from collections.abc import Iterable

from .fields import COOPERATIVE, COOPERATIVE_INPUT
from .splice import replace_subtree, subtree_offsets
from .wire import encode_len_field


def cooperative(subtree: bytes) -> bytes:
    """The bytes of a CooperativeExec over the plan `subtree`."""
    return encode_len_field(COOPERATIVE, encode_len_field(COOPERATIVE_INPUT, subtree))


def wrap_cooperative(plan: bytes, subtrees: Iterable[bytes]) -> bytes:
    """`plan` with every copy of each of `subtrees` (the plan itself included) wrapped in a
    CooperativeExec. Raises SpliceError or WireError when the plan cannot be read.

    A wrapped copy still holds its subtree (as the wrapper's input), so copies keep their count
    and order while they are wrapped one by one; enclosing subtrees go first, as wrapping one
    inside them would change their bytes."""
    for subtree in sorted(set(subtrees), key=len, reverse=True):
        wrapped = cooperative(subtree)
        if plan == subtree:
            plan = wrapped
            continue
        for occurrence in range(len(subtree_offsets(plan, subtree))):
            plan = replace_subtree(plan, subtree, wrapped, occurrence)
    return plan
