"""A copy of an exchange file that cannot be written here (disk full, no permission, read-only)
is an error of this side: it names who could not write, marks no worker dead, and the query is
still released on every worker that ran a task of it."""

from __future__ import annotations

import dataclasses
import errno
import os
import tempfile

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, EmbeddedCluster, QueryFailed
from datafusion_distributed.errors import WorkerUnreachable
from datafusion_distributed.events import EventKind
from datafusion_distributed.protocol import flight
from datafusion_distributed.protocol.flight import LocalWriteError, lost_worker
from datafusion_distributed.test_utils.recorder import EventRecorder as Recorder
from datafusion_distributed.test_utils.tpch import register_tpch

pytestmark = pytest.mark.timeout(120)

CONFIG = DistributedConfig(bytes_per_partition=1024, connect_timeout=5, adaptive=False)
# Two stages, as planned (not re-planned from their sizes, which would run the small last
# one in the coordinator): workers copy the shuffle's files from each other, the coordinator copies the
# last stage's inputs to merge them.
SQL = "SELECT o_orderpriority, count(*) AS n FROM orders GROUP BY 1 ORDER BY 1"


class FailingFile:
    """A file whose writes fail with `code` (ENOSPC: as on a full disk)."""

    def __init__(self, path: str, code: int):
        self.path = path
        self.code = code

    def write(self, data) -> int:
        raise OSError(self.code, os.strerror(self.code), self.path)

    def close(self) -> None:
        pass

    def __enter__(self) -> FailingFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def failing_writes_under(monkeypatch, folder: str, code: int = errno.ENOSPC) -> None:
    """Make the copies of exchange files into `folder` (anywhere below it) fail with `code`."""

    def open_for_copy(path, mode="r", *args, **kwargs):
        if str(path).startswith(folder):
            return FailingFile(str(path), code)
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(flight, "open", open_for_copy, raising=False)


def run(cluster, recorder: Recorder) -> None:
    ctx = SessionContext()
    register_tpch(ctx, cluster.tpch)
    config = dataclasses.replace(CONFIG, auth_token=cluster.auth_token)
    dctx = DistributedContext(ctx, workers=cluster.get_urls(), config=config, handlers=[recorder])
    dctx.sql(SQL).to_arrow_table()


@pytest.fixture
def cluster(tpch_sf001):
    """Workers with spools of their own: every exchange file is copied over the network."""
    with EmbeddedCluster(3, shared_spool_root=None) as c:
        c.tpch = tpch_sf001
        yield c


def unreachable(recorder: Recorder) -> list:
    return [e for e in recorder.events if e.kind is EventKind.WORKER_UNREACHABLE]


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ENOSPC, r"\[Errno 28\] No space left on device"),
        (errno.EACCES, r"\[Errno 13\] Permission denied"),
        (errno.EROFS, r"\[Errno 30\] Read-only file system"),
    ],
)
def test_the_coordinator_unable_to_write_is_its_own_error(monkeypatch, cluster, tmp_path, code, reason):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the coordinator copies inputs
    failing_writes_under(monkeypatch, str(tmp_path), code)
    recorder = Recorder()
    with pytest.raises(QueryFailed, match=rf"the coordinator could not write its input copy \S+: {reason}$"):
        run(cluster, recorder)
    assert unreachable(recorder) == []  # no worker was blamed, none marked dead
    assert cluster.spool_files() == []  # every worker that ran a task released the query


def test_the_coordinator_unable_to_make_its_folder_is_its_own_error(monkeypatch, cluster):
    def mkdtemp(*args, **kwargs):
        raise PermissionError(
            errno.EACCES, os.strerror(errno.EACCES), "/scratch/datafusion-distributed-head-x"
        )

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    recorder = Recorder()
    with pytest.raises(
        QueryFailed, match=r"the coordinator could not write its input copy /scratch/\S+: \[Errno 13\]"
    ):
        run(cluster, recorder)
    assert unreachable(recorder) == []
    assert cluster.spool_files() == []


def test_a_worker_out_of_disk_is_its_own_error(monkeypatch, cluster):
    spools = os.path.dirname(cluster.workers[0].spool.root)
    failing_writes_under(monkeypatch, spools)
    recorder = Recorder()
    with pytest.raises(
        QueryFailed, match=r"worker grpc://\S+ could not write its input copy \S+: \[Errno 28\] No space left"
    ):
        run(cluster, recorder)
    assert unreachable(recorder) == []
    assert cluster.spool_files() == []


def test_a_local_write_error_is_no_lost_worker():
    error = LocalWriteError(
        "/spool/x.arrow", OSError(errno.EROFS, "Read-only file system"), "the coordinator"
    )
    assert lost_worker(error) is None
    try:
        try:
            raise WorkerUnreachable("grpc://127.0.0.1:1", "reset")
        except WorkerUnreachable:
            raise error  # noqa: B904 - the implicit context is what is tested
    except LocalWriteError as exc:
        assert lost_worker(exc) is None  # a write that failed here is not the remote's fault
