"""Workers confined to CPUs (`worker --cpus`, `LocalCluster(worker_cpus=...)`): DataFusion's thread
pool in each is sized to its CPUs, as on a machine of that many cores."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.common.cpus import confine_to, format_cpu_list, parse_cpu_list

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")


@pytest.mark.parametrize(
    ("text", "cpus"), [("0", {0}), ("0,2", {0, 2}), ("0-3,6", {0, 1, 2, 3, 6}), (" 1 - 2 ", {1, 2})]
)
def test_cpu_lists_read_as_linux_writes_them(text, cpus):
    assert parse_cpu_list(text) == cpus
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


@pytest.mark.parametrize("text", ["", "a", "3-1", "-1", "1,,2"])
def test_a_bad_cpu_list_is_refused(text):
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpu_list(text)


@linux_only
def test_confining_to_a_cpu_this_process_may_not_use_is_refused():
    beyond = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(ValueError, match=f"CPUs {beyond} are not among"):
        confine_to({beyond})


def _cpus_of_every_thread(pid: int) -> set[frozenset[int]]:
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found.add(_allowed_cpus(f"{pid}/task/{tid}"))
        except OSError:
            pass  # a thread that has just ended
    return found


def _allowed_cpus(pid: int | str) -> frozenset[int]:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("Cpus_allowed_list:"))
    return parse_cpu_list(line.split(":", 1)[1])


@linux_only
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_each_worker_runs_every_thread_on_its_cpus(tmp_path):
    first, second = sorted(os.sched_getaffinity(0))[:2]
    for i in range(2):
        pq.write_table(pa.table({"k": list(range(i, 1000, 2))}), tmp_path / f"{i}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path))
    with LocalCluster(2, worker_cpus=[[first], [second]]) as cluster:
        pids = [p.pid for p in cluster.processes]
        assert [_allowed_cpus(pid) for pid in pids] == [{first}, {second}]
        config = DistributedConfig(bytes_per_partition=1, partitions_per_task=1)
        with DistributedContext(ctx, workers=cluster, config=config) as dctx:
            df = dctx.sql("SELECT k % 7 AS r, count(*) FROM t GROUP BY 1")
            df.collect()
            assert {t.worker for s in df.metrics.stages.values() for t in s.tasks} >= set(cluster.urls)
        # every thread, those started by its queries too (DataFusion's, gRPC's), on its CPU
        assert [_cpus_of_every_thread(pid) for pid in pids] == [{frozenset([first])}, {frozenset([second])}]


@linux_only
def test_a_worker_given_cpus_it_may_not_use_says_so():
    beyond = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(RuntimeError, match="exited with status 1 before listening"):
        LocalCluster(1, worker_cpus=[[beyond]])


def test_worker_cpus_must_give_each_worker_a_cpu():
    with pytest.raises(ValueError, match="at least one CPU"):
        LocalCluster(1, worker_cpus=[[]])


def test_the_worker_command_reads_cpus():
    from datafusion_distributed.cli import build_parser

    args = build_parser().parse_args(["worker", "--cpus", "0-1"])
    assert args.cpus == {0, 1}
