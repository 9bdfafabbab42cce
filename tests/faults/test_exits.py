"""A program that started a cluster and is ended by a signal mid-query leaves nothing behind (no
worker process, no temporary folder of the library) and ends as the signal would have ended it;
its own signal handlers are left alone. Workers outlive neither their parent nor, when they
made it, their spool."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datafusion_distributed import EmbeddedCluster
from datafusion_distributed.common import exits

CHILD = Path(__file__).with_name("signal_child.py")
PREFIX = "datafusion-distributed-"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Four files of 100,000 rows in row groups of 4096: the slow query takes about 8 s."""
    folder = tmp_path_factory.mktemp("slow")
    for p in range(4):
        table = pa.table({"k": pa.array(range(p * 100_000, (p + 1) * 100_000), pa.int64())})
        pq.write_table(table, folder / f"p{p}.parquet", row_group_size=4096)
    return folder


def start_child(kind: str, data: Path, tmp: Path) -> tuple[subprocess.Popen, list[int]]:
    """Start the child with `tmp` as its temporary folder; return it and its workers' process
    ids once its query is running."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), kind, str(data)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        pids = [int(p) for p in child.stdout.readline().split()[1:]]
        assert child.stdout.readline().strip() == "running"
    except BaseException:
        child.kill()
        raise
    return child, pids


def ended_by(child: subprocess.Popen, sig: int, seconds: float = 20) -> int:
    """Send `sig` to the child; its exit status (bounded wait)."""
    child.send_signal(sig)
    try:
        return child.wait(seconds)
    finally:
        child.kill()
        child.stdout.close()


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def leftovers(tmp: Path, pids: list[int], within: float = 5) -> tuple[list[str], list[int]]:
    """The library's folders in `tmp` and the workers still running, once both are gone or
    `within` seconds have passed."""
    deadline = time.monotonic() + within
    while True:
        folders = sorted(p.name for p in tmp.iterdir() if p.name.startswith(PREFIX))
        running = [pid for pid in pids if alive(pid)]
        if (not folders and not running) or time.monotonic() > deadline:
            return folders, running
        time.sleep(0.1)


# -- a program ended by a signal --------------------------------------------------------------
@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "kind, sig",
    [
        ("local", signal.SIGTERM),
        ("embedded", signal.SIGTERM),
        ("embedded", signal.SIGHUP),
        pytest.param("local", signal.SIGHUP, marks=pytest.mark.slow),
    ],
    ids=["local-SIGTERM", "embedded-SIGTERM", "embedded-SIGHUP", "local-SIGHUP"],
)
def test_a_signal_mid_query_cleans_up_then_ends_the_process_by_it(kind, sig, data, tmp_path):
    child, pids = start_child(kind, data, tmp_path)

    assert ended_by(child, sig) == -sig
    assert leftovers(tmp_path, pids) == ([], [])


@pytest.mark.timeout(90)
def test_the_coordinators_scratch_folder_goes_too(data, tmp_path):
    """The child copies its last stage's inputs into a scratch folder, and is ended meanwhile."""
    child, pids = start_child("fetching", data, tmp_path)

    assert ended_by(child, signal.SIGTERM) == -signal.SIGTERM
    assert leftovers(tmp_path, pids) == ([], [])


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_program_with_its_own_handler_cleans_up_at_exit(data, tmp_path):
    child, pids = start_child("own-handler", data, tmp_path)

    assert ended_by(child, signal.SIGTERM) == 3  # its handler's sys.exit(3)
    assert leftovers(tmp_path, pids) == ([], [])


@pytest.mark.timeout(90)
def test_workers_of_a_killed_program_exit_and_remove_their_spools(data, tmp_path):
    """SIGKILL cannot be handled: the workers see their parent gone, stop and delete their spools
    (the last one the cluster's folder)."""
    child, pids = start_child("local", data, tmp_path)

    assert ended_by(child, signal.SIGKILL) == -signal.SIGKILL
    assert leftovers(tmp_path, pids, within=10) == ([], [])


# -- a worker ended by a signal ---------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_worker_deletes_the_spool_it_made_when_it_stops(sig, tmp_path):
    worker = subprocess.Popen(
        [sys.executable, "-m", "datafusion_distributed", "worker", "--port", "0", "--insecure-no-auth"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        assert worker.stdout.readline().startswith("listening on ")
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(PREFIX)] != []
    except BaseException:
        worker.kill()
        raise

    assert ended_by(worker, sig) == 0
    assert leftovers(tmp_path, []) == ([], [])


# -- the handlers themselves --------------------------------------------------------------------
def handlers() -> list:
    return [signal.getsignal(sig) for sig in exits.EXIT_SIGNALS]


@pytest.fixture
def default_handlers():
    """SIGTERM and SIGHUP at their default action during the test, and put back after it."""
    before = handlers()
    for sig in exits.EXIT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    yield
    for sig, handler in zip(exits.EXIT_SIGNALS, before, strict=True):
        signal.signal(sig, handler)


def test_handlers_are_installed_while_a_cluster_is_alive_only(default_handlers):
    with EmbeddedCluster(1):
        assert signal.SIG_DFL not in handlers()
        with EmbeddedCluster(1):
            pass
        assert signal.SIG_DFL not in handlers()  # the first one is still alive
    assert handlers() == [signal.SIG_DFL] * len(exits.EXIT_SIGNALS)


def test_a_handler_of_the_programs_own_or_an_ignored_signal_is_left_alone(default_handlers):
    def own(signum, frame):
        pass

    signal.signal(signal.SIGTERM, own)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with EmbeddedCluster(1):
        assert handlers() == [own, signal.SIG_IGN]
    assert handlers() == [own, signal.SIG_IGN]


def test_a_handler_set_over_the_librarys_is_not_undone_at_close(default_handlers):
    def own(signum, frame):
        pass

    with EmbeddedCluster(1):
        signal.signal(signal.SIGTERM, own)
    assert signal.getsignal(signal.SIGTERM) is own
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL


def test_a_cluster_started_outside_the_main_thread_installs_nothing(default_handlers):
    seen = []
    thread = threading.Thread(target=lambda: seen.append(EmbeddedCluster(1)))
    thread.start()
    thread.join(30)
    try:
        assert handlers() == [signal.SIG_DFL] * len(exits.EXIT_SIGNALS)
    finally:
        seen[0].close()


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_forked_child_ended_by_a_signal_leaves_its_parents_cluster_alone(default_handlers):
    """A child forked by multiprocessing inherits the handler; `terminate()` sends it SIGTERM."""
    with EmbeddedCluster(1) as cluster:
        pid = os.fork()
        if pid == 0:  # the child
            os.kill(os.getpid(), signal.SIGTERM)
            os._exit(1)  # not reached
        _, status = os.waitpid(pid, 0)

        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        assert os.path.isdir(cluster.shared_spool_root)
