"""The workers' state as the dashboard shows it: a frozen worker shows as not answering within
the wait, the others as answering with their load, and the frozen one answers again once it
runs. Frozen with SIGSTOP: a worker process of a LocalCluster this test starts."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request

from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.dashboard.workers import WorkerStatus

WAIT = 30.0


def test_a_frozen_worker_shows_as_not_answering_then_answers_again():
    config = DistributedConfig(dashboard_port=0)
    with LocalCluster(2) as cluster, DistributedContext(SessionContext(), cluster, config=config) as dctx:
        engine = dctx.engine
        frozen, running = cluster.get_urls()[0], cluster.get_urls()[1]
        status = WorkerStatus(
            cluster.get_urls, engine.clients, engine.liveness, engine.history, wait_seconds=1.0
        )
        assert {s.health for s in status.states()} == {"ok"}
        time.sleep(1.1)  # the answers are no longer fresh: the next call asks again
        os.kill(cluster.processes[0].pid, signal.SIGSTOP)
        try:
            states = {s.url: s for s in status.states()}
            assert states[frozen].health == "not answering" and states[running].health == "ok"
            assert states[running].memory_bytes > 0 and states[running].worker_running_tasks == 0
            assert not states[running].in_process  # a process of its own: its own memory

            deadline = time.monotonic() + WAIT  # the page's view: asked without waiting, polled
            shown = None
            while time.monotonic() < deadline and shown != "not answering":
                with urllib.request.urlopen(dctx.dashboard_url + "api/workers", timeout=10) as answer:
                    shown = {w["url"]: w["health"] for w in json.load(answer)["workers"]}[frozen]
                time.sleep(0.2)
            assert shown == "not answering"
        finally:
            os.kill(cluster.processes[0].pid, signal.SIGCONT)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and status.states()[0].health != "ok":
            time.sleep(0.2)
        assert status.states()[0].health == "ok"


def test_a_draining_worker_shows_so():
    with DistributedContext(SessionContext(), config=DistributedConfig(embedded_workers=2)) as dctx:
        engine = dctx.engine
        status = WorkerStatus(engine.resolver.get_urls, engine.clients, engine.liveness, engine.history)
        assert [s.health for s in status.states()] == ["ok", "ok"]
        engine.resolver.workers[0].drain()
        time.sleep(1.1)  # the answers are no longer fresh: the next call asks again
        assert [s.health for s in status.states()] == ["drained", "ok"]  # nothing running or held
