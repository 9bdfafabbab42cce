"""Sort keys and PARTITION BY keys inside plan bytes, as serialised expressions.

Expressions over the same input serialise alike (a column as its name and index), so
comparing their bytes tells whether a window's PARTITION BY columns are the ones a sort below
it orders by, without decoding a single expression.
"""

from __future__ import annotations

from . import fields as F
from .children import node_message
from .wire import LEN, WireError, iter_fields


def _repeated(message: bytes, number: int) -> list[bytes]:
    """The payloads of every length-delimited field `number` of `message`, in order."""
    return [f.payload(message) for f in iter_fields(message) if f.number == number and f.wire_type == LEN]


def _one(message: bytes, number: int) -> bytes:
    found = _repeated(message, number)
    if len(found) != 1:
        raise WireError(f"expected one field {number}, found {len(found)}")
    return found[0]


def sort_keys(node: bytes) -> list[bytes]:
    """The expressions a SortExec or SortPreservingMergeExec orders by, most significant
    first (directions left out: any direction keeps equal values together)."""
    body = node_message(node, F.SORT, F.SORT_PRESERVING_MERGE)
    return [_one(_one(key, F.EXPR_SORT), F.SORT_EXPR_EXPR) for key in _repeated(body, F.SORT_KEYS)]


def window_partition_keys(node: bytes) -> list[list[bytes]]:
    """The PARTITION BY expressions of each window function of a window node."""
    body = node_message(node, F.WINDOW_AGG)
    return [_repeated(expr, F.WINDOW_PARTITION_BY) for expr in _repeated(body, F.WINDOW_EXPRS)]
