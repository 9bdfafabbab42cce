"""Weighted items dealt to groups largest first, each to the group lightest so far: how a skewed
partition's files are shared between tasks, and how loaded the busiest worker would be."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

K = TypeVar("K")


def deal(items: Iterable[tuple[K, float]], groups: int) -> list[tuple[list[K], float]]:
    """(keys, total weight) of each of `groups` groups (at least one) that the (key, weight)
    `items` are dealt to, largest first, each to the lightest group so far.

    Examples:
        >>> deal([("a", 10), ("b", 30), ("c", 20)], 2)
        [(['b'], 30), (['c', 'a'], 30)]
    """
    dealt: list[list[K]] = [[] for _ in range(max(1, groups))]
    loads: list[float] = [0] * len(dealt)
    for key, weight in sorted(items, key=lambda item: -item[1]):
        lightest = loads.index(min(loads))
        dealt[lightest].append(key)
        loads[lightest] += weight
    return list(zip(dealt, loads, strict=True))
