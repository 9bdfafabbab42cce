"""A worker's spool: releasing and sweeping queries' folders."""

from __future__ import annotations

import os
import time

from datafusion_distributed.protocol.messages import TaskKey
from datafusion_distributed.worker.spool import RELEASED, Spool

QUERY = "a" * 32
OTHER = "b" * 32


def write(spool: Spool, query_id: str, partition: int = 0) -> str:
    path = spool.output_path(query_id, 1, 0, partition)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * 100)
    return path


def wait_until_deleted(spool: Spool, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while spool.deleting() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not spool.deleting(), "released files were not deleted"


def test_release_takes_a_query_out_at_once_and_deletes_it_in_the_background(tmp_path):
    spool = Spool(str(tmp_path))
    kept = write(spool, OTHER)
    for partition in range(3):
        write(spool, QUERY, partition)
    spool.charge(QUERY, 300)

    spool.release(QUERY)

    assert spool.files() == [kept]  # gone from the spool before its files are deleted
    assert not os.path.exists(spool.query_dir(QUERY))
    assert spool.used_bytes() == 0
    wait_until_deleted(spool)
    assert os.listdir(tmp_path / RELEASED) == []


def test_releasing_a_query_with_no_data_or_twice_does_nothing(tmp_path):
    spool = Spool(str(tmp_path))
    spool.release(QUERY)
    write(spool, QUERY)
    spool.release(QUERY)
    spool.release(QUERY)
    wait_until_deleted(spool)
    assert spool.files() == []


def test_sweep_removes_old_queries_only(tmp_path):
    spool = Spool(str(tmp_path), ttl_seconds=60)
    old, new = write(spool, QUERY), write(spool, OTHER)
    long_ago = time.time() - 3600
    os.utime(spool.query_dir(QUERY), (long_ago, long_ago))
    spool.release("c" * 32)  # makes the released folder, which is not a query

    assert spool.sweep() == [QUERY]

    assert spool.files() == [new] and not os.path.exists(old)
    wait_until_deleted(spool)


def test_a_new_spool_deletes_what_a_stopped_worker_left_being_deleted(tmp_path):
    leftover = tmp_path / RELEASED / f"{QUERY}-0000"
    leftover.mkdir(parents=True)
    (leftover / "part-0.arrow").write_bytes(b"x")

    spool = Spool(str(tmp_path))

    wait_until_deleted(spool)
    assert not leftover.exists()


def _age(spool: Spool, query_id: str, seconds: float) -> None:
    """Make a query's folder look untouched for `seconds` (a running task writes deeper down,
    which leaves the folder's own modification time alone)."""
    long_ago = time.time() - seconds
    os.utime(spool.query_dir(query_id), (long_ago, long_ago))


def test_a_query_whose_lease_is_renewed_survives_the_sweep_past_the_ttl(tmp_path):
    spool = Spool(str(tmp_path), ttl_seconds=60)
    kept, swept = write(spool, QUERY), write(spool, OTHER)
    _age(spool, QUERY, 3600)
    _age(spool, OTHER, 3600)

    spool.renew([QUERY])  # its coordinator still runs it

    assert spool.sweep() == [OTHER]
    assert spool.files() == [kept] and not os.path.exists(swept)
    # the lease runs from the renewal: unrenewed for longer than the TTL, the query goes
    assert spool.sweep(now=time.time() + 30) == []
    assert spool.sweep(now=time.time() + 61) == [QUERY]
    wait_until_deleted(spool)


def test_a_query_whose_task_is_writing_is_not_swept(tmp_path):
    spool = Spool(str(tmp_path), ttl_seconds=60)
    write(spool, QUERY)
    _age(spool, QUERY, 3600)

    spool.charge(QUERY, 100)  # a task of it wrote a batch just now

    assert spool.sweep() == []
    assert spool.sweep(now=time.time() + 61) == [QUERY]
    wait_until_deleted(spool)


def test_a_released_query_forgets_its_lease(tmp_path):
    spool = Spool(str(tmp_path), ttl_seconds=60)
    spool.renew([QUERY])
    spool.release(QUERY)
    write(spool, QUERY)  # a straggler's output, after the release
    _age(spool, QUERY, 3600)

    assert spool.sweep() == [QUERY]
    wait_until_deleted(spool)


def test_a_new_spool_deletes_the_queries_a_previous_worker_left(tmp_path):
    """A worker killed mid-query, then started again on its folder: nothing can read the old
    outputs any more (they were served by the dead worker), so they go; other files stay."""
    before = Spool(str(tmp_path))
    write(before, QUERY)
    inputs = before.inputs_dir(TaskKey(OTHER, 2, 0, 1))
    os.makedirs(inputs)
    (tmp_path / "notes.txt").write_text("not a query folder")

    spool = Spool(str(tmp_path))

    wait_until_deleted(spool)
    assert spool.files() == [str(tmp_path / "notes.txt")]
    assert sorted(os.listdir(tmp_path)) == sorted([RELEASED, "notes.txt"])
