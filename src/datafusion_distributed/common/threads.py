"""Threads kept between tasks and queries.

Starting a thread costs about half a millisecond here, and a query used to start several per
task (one per output partition, a few to fetch inputs, one per task call). The pool reuses idle
threads and starts a new one whenever none is idle, so work is never queued behind other work:
partitions of one plan may wait for each other, and each needs a thread at once. Its bound is
only a guard.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

kept_threads = ThreadPoolExecutor(max_workers=4096, thread_name_prefix="datafusion-distributed")


def map_concurrently(fn: Callable[[Any], Any], items: Sequence, concurrency: int) -> list:
    """`[fn(item) for item in items]`, `concurrency` at a time (the calling thread is one of
    them, so a single item runs right here); raises an error once every call has ended."""
    results: list = [None] * len(items)
    pending = iter(range(len(items)))
    lock = threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                index = next(pending, None)
            if index is None:
                return
            results[index] = fn(items[index])

    runners = [kept_threads.submit(drain) for _ in range(min(concurrency, len(items)) - 1)]
    try:
        drain()
    finally:
        wait(runners)
    for runner in runners:
        runner.result()
    return results
