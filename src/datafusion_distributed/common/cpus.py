"""Confining a worker process to some CPUs, as if it ran on a machine of that many cores.

DataFusion sizes its thread pool and its default partition count from the CPUs the process may
use when it first runs a query, so a worker must be confined before its first query: then it
behaves as a worker on a smaller machine would (`worker --cpus`, `LocalCluster(worker_cpus=...)`).
Linux only (`os.sched_setaffinity`).
"""

from __future__ import annotations

import os
from collections.abc import Collection


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a list written as Linux writes them: "0", "0,2", "0-3,6"."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError:
            raise ValueError(f"not a CPU list (like 0-3,6): {text!r}") from None
        if low < 0 or high < low:
            raise ValueError(f"not a CPU list (like 0-3,6): {text!r}")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Collection[int]) -> str:
    """`cpus` written as `parse_cpu_list` reads them ("0,2,3")."""
    return ",".join(str(cpu) for cpu in sorted(cpus))


def confine_to(cpus: Collection[int]) -> None:
    """Run every thread of this process, and the threads it starts later, on `cpus` only.

    Raises ValueError naming the CPUs this process may use when `cpus` is empty or holds one
    outside them, and OSError where the platform cannot confine a process."""
    if not hasattr(os, "sched_setaffinity"):
        raise OSError("confining a process to CPUs needs Linux (os.sched_setaffinity)")
    allowed = os.sched_getaffinity(0)
    wanted = set(cpus)
    if not wanted or not wanted <= allowed:
        raise ValueError(
            f"CPUs {format_cpu_list(wanted) or '(none)'} are not among those this process may use: "
            f"{format_cpu_list(allowed)}"
        )
    for thread in _threads():
        try:
            os.sched_setaffinity(thread, wanted)
        except ProcessLookupError:
            pass  # a thread that has just ended


def _threads() -> list[int]:
    """The ids of this process's threads (0, the calling one, where /proc does not list them)."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return [0]
