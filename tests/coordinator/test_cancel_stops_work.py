"""A cancelled or timed-out query stops its work, not only its caller.

On the embedded cluster every task runs in this process, so this process's CPU time shows
whether the work stopped: after the query raises, the process must fall idle within seconds,
the next small query must run at its usual speed, and close() must not wait for abandoned work.
The heavy query is a self-join whose hash join produces four billion pairs: tens of seconds of
work that yields no batch until it is done.
"""

from __future__ import annotations

import _thread
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, QueryCancelled, QueryTimedOut

ROWS = 200_000
GROUPS = 10  # each row meets ROWS / GROUPS others: 4e9 pairs, about 20 s on one node of 2 cores
HEAVY_SQL = "SELECT count(*) AS n FROM t a JOIN t b ON a.g = b.g WHERE a.k + b.k > 7"
SMALL_SQL = "SELECT count(*) AS n FROM t WHERE k % 7 = 0"
SMALL_ANSWER = [{"n": (ROWS + 6) // 7}]
STOP_AFTER = 2.0  # seconds into the heavy query
IDLE_CORES = 0.25  # busy below this: idle (a running join keeps at least one core busy)


def write_heavy_table(folder) -> None:
    """`t(k, g)`: ROWS keys in 4 Parquet files, g = k % GROUPS."""
    for part in range(4):
        keys = pa.array(range(part * ROWS // 4, (part + 1) * ROWS // 4), pa.int64())
        table = pa.table({"k": keys, "g": pc.remainder(keys, GROUPS)})
        pq.write_table(table, folder / f"p{part}.parquet", row_group_size=8192)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("heavy")
    write_heavy_table(folder)
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    return ctx


def cores_busy(seconds: float = 1.0) -> float:
    """CPU seconds this process used per second over the next `seconds`."""
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(seconds)
    return (time.process_time() - cpu) / (time.monotonic() - wall)


def busy_until_idle(windows: int) -> list[float]:
    """Cores used in consecutive one-second windows, until one is idle (at most `windows`)."""
    seen: list[float] = []
    while len(seen) < windows and (not seen or seen[-1] >= IDLE_CORES):
        seen.append(round(cores_busy(), 2))
    return seen


@pytest.mark.timeout(300)  # before the fix, close() waited for the whole join
@pytest.mark.parametrize("how", ["cancel", "query_timeout", "ctrl_c"])
def test_a_stopped_query_frees_the_cpu_and_close_returns(ctx, how):
    timeout = STOP_AFTER if how == "query_timeout" else None
    config = DistributedConfig(bytes_per_partition=64 * 1024, query_timeout=timeout)
    dctx = DistributedContext(ctx, config=config)
    try:
        small = dctx.sql(SMALL_SQL)
        assert small.to_pylist() == SMALL_ANSWER
        heavy = dctx.sql(HEAVY_SQL)
        assert heavy.distributed_plan().is_distributed  # its tasks run on the embedded workers
        if how == "cancel":
            threading.Timer(STOP_AFTER, heavy.cancel).start()
        if how == "ctrl_c":
            threading.Timer(STOP_AFTER, _thread.interrupt_main).start()
        raised = {"cancel": QueryCancelled, "query_timeout": QueryTimedOut, "ctrl_c": KeyboardInterrupt}[how]
        started = time.monotonic()
        with pytest.raises(raised):
            heavy.to_pylist()
        assert time.monotonic() - started < STOP_AFTER + 3
        busy = busy_until_idle(windows=4)
        assert busy[-1] < IDLE_CORES, f"cores still busy in each second after the query stopped: {busy}"
        started = time.monotonic()
        assert small.to_pylist() == SMALL_ANSWER
        assert time.monotonic() - started < 5
    finally:
        started = time.monotonic()
        dctx.close()
        closed = time.monotonic() - started
    assert closed < 5


@pytest.mark.timeout(300)
def test_close_stops_the_work_of_a_query_still_running(ctx):
    """close() from another thread while a query runs: the embedded workers stop its tasks
    rather than wait for them, and the query fails in its own thread."""
    dctx = DistributedContext(ctx, config=DistributedConfig(bytes_per_partition=64 * 1024))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            dctx.sql(HEAVY_SQL).to_pylist()
        except BaseException as exc:  # recorded for the assertion below
            errors.append(exc)

    query = threading.Thread(target=run, daemon=True)
    query.start()
    time.sleep(STOP_AFTER)
    started = time.monotonic()
    dctx.close()
    assert time.monotonic() - started < 5
    query.join(10)
    assert not query.is_alive() and errors, "the query did not end when its workers were stopped"
    busy = busy_until_idle(windows=4)
    assert busy[-1] < IDLE_CORES, f"cores still busy in each second after close(): {busy}"
