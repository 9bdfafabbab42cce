"""Workers as Ray actors (`RayCluster`): distributed DataFusion on a Ray cluster.

Each actor runs a `FlightWorker` on its node, listening on the node's IP address, with its
spool in a folder of that node's local disk that the actor makes and removes. The cluster is a
resolver: it asks the actors for their URLs as every query and every stage starts (at most once
per `worker_refresh_seconds`), so a restarted actor (a new process on a new port), or one added
by `scale`, is used from the next stage on; one removed by `scale` drains first. Workers on
different machines cannot read each other's spools, so they never share them in place:
exchanges cross Flight, and the "auto" compression picks lz4 for them.

Ray is imported only with this module, which the package loads when `RayCluster` is first
asked for: `import datafusion_distributed` does not need Ray.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

try:
    import ray
    from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError as exc:  # the optional extra is missing
    raise ImportError(
        "RayCluster needs Ray: install it with pip install 'datafusion-distributed[ray]'"
    ) from exc

from ..common import exits
from ..common.allocator import runtime_env_handing_back_lazily
from ..protocol.auth import check_token, new_token
from ..runtime.extensions import check_names
from ..runtime.session import SessionBuilder
from ..worker.flight_worker import FlightWorker

log = logging.getLogger(__name__)

# placement -> the placement group strategy it uses (None: no group, Ray's SPREAD scheduling);
# "auto" becomes "strict_spread" or "spread" once the nodes are known (`_resolve_placement`)
STOP_TIMEOUT = 30.0  # seconds close() waits for the workers to stop before killing their actors
RETRY_PAUSE = 0.2  # seconds between questions to a restarting actor
PLACEMENTS: dict[str, str | None] = {
    "auto": None,
    "strict_spread": "STRICT_SPREAD",
    "spread": None,
    "pack": "PACK",
}


class _RayWorker:
    """The body of one worker actor: a FlightWorker on this node, its spool in a folder of
    the node's temporary directory, made here and removed by `stop`. Private: `ray.remote`
    rewrites the signatures of the class it is given (adding a tracing argument).

    The folder's name is fixed for the actor (the cluster's random id and the actor's index),
    so a restarted actor finds the folder its previous process left and its spool deletes what
    was in it."""

    def __init__(
        self,
        spool_name: str,
        host: str | None,
        auth_token: str,
        session_builder: SessionBuilder | None,
        worker_options: Mapping[str, Any],
    ) -> None:
        self.spool_dir = os.path.join(tempfile.gettempdir(), spool_name)
        os.makedirs(self.spool_dir, mode=0o700, exist_ok=True)
        try:
            self.worker = FlightWorker(
                self.spool_dir,
                host=host or ray.util.get_node_ip_address(),
                session_builder=session_builder,
                auth_token=auth_token,
                **worker_options,
            )
        except BaseException:  # an actor that failed to start is never stopped: leave no folder
            shutil.rmtree(self.spool_dir, ignore_errors=True)
            raise

    def url(self) -> str:
        """The worker's URL (a new port after every restart)."""
        return self.worker.url

    def spool(self) -> str:
        """The spool folder on this actor's node."""
        return self.spool_dir

    def stop(self) -> None:
        """Stop the worker and delete its spool folder."""
        self.worker.stop()
        shutil.rmtree(self.spool_dir, ignore_errors=True)

    def drain(self, timeout: float) -> bool:
        """Drain the worker (no new task; running ones finished, held outputs served until
        released) for up to `timeout` seconds, then stop it; whether it drained in time."""
        self.worker.drain()
        drained = self.worker.wait_drained(timeout)
        self.stop()
        return drained


class RayCluster:
    """`n` workers as Ray actors, one per node by default: a context manager and a resolver::

        with RayCluster() as cluster:  # on the Ray of `ray.init()`, or a local one
            dctx = DistributedContext(ctx, workers=cluster)

    Args:
        n: how many workers. Default: one per alive node of the Ray cluster.
        address: the Ray cluster to connect to when Ray is not initialised yet ("auto", or
            "ray://head:10001" for Ray Client); None starts a local Ray (or joins the one
            `RAY_ADDRESS` names). A Ray this process had already initialised is used as it
            is, and left running on `close()`.
        placement: "auto" (the default: "strict_spread" when the Ray cluster has a node per
            worker, else "spread", so that a laptop's one-node Ray works at once),
            "strict_spread" (one worker per node, in a STRICT_SPREAD placement group; workers
            beyond the nodes wait, up to `start_timeout`, for nodes to join, as an autoscaling
            cluster adds them), "spread" (Ray's SPREAD scheduling:
            spread as far as possible, several on one node if needed) or "pack" (a PACK
            placement group: as few nodes as possible, as in tests on one machine).
        host: the address each worker listens on and is reached at. Default: its node's IP
            address as Ray knows it. The coordinator must reach it.
        session_builder: hook building each worker's SessionContext (object stores, UDFs,
            config); it is pickled and sent to the actors.
        auth_token: the workers' shared token (random unless given), passed to the actors as
            an argument, never through their environment or a log.
        num_cpus: CPUs Ray reserves for each worker (DataFusion still uses the node's cores).
        max_restarts: how often Ray restarts a worker whose process died (-1: always).
        actor_options: other Ray actor options (`resources`, `runtime_env`, `memory`, ...).
        start_timeout: seconds to wait for the workers (and their placement) before failing.
        url_timeout: seconds `get_urls` waits for an actor to answer (one restarting answers
            once its new worker listens); one that does not answer is left out.
        drain_timeout: seconds a worker removed by `scale` has to drain before it stops.
        worker_options: passed to every `FlightWorker` (for example `spool_quota_bytes`,
            `memory_limit_bytes`, `tls_cert`/`tls_key`, and `extensions`, by importable name
            only: see docs/extensions.md).

    `scale(n)` changes the number of workers while queries run: new actors' workers take the
    tasks of the stages that start once they listen; removed ones are unlisted at once and drained.

    Workers are stopped, their spools deleted and their actors killed on `close()`, on exit of
    the `with` block, at interpreter exit (where Ray's own SIGTERM handler leads) and on
    SIGHUP; the actors belong to this process, so Ray also ends them if it dies.
    """

    def __init__(
        self,
        n: int | None = None,
        *,
        address: str | None = None,
        placement: str = "auto",
        host: str | None = None,
        session_builder: SessionBuilder | None = None,
        auth_token: str | None = None,
        num_cpus: float = 1,
        max_restarts: int = 3,
        actor_options: Mapping[str, Any] | None = None,
        start_timeout: float = 120.0,
        url_timeout: float = 30.0,
        drain_timeout: float = 25.0,
        **worker_options: Any,
    ) -> None:
        if placement not in PLACEMENTS:
            raise ValueError(
                f"placement must be one of {', '.join(map(repr, PLACEMENTS))}, not {placement!r}"
            )
        if n is not None and n < 1:
            raise ValueError("a Ray cluster needs at least one worker")
        if "extensions" in worker_options:  # names, which reach the actors' processes
            worker_options["extensions"] = check_names(worker_options["extensions"], "Ray workers")
        if "shared_spool_root" in worker_options:
            raise ValueError("Ray workers do not share spools in place: their outputs cross Flight")
        if num_cpus <= 0:
            raise ValueError("num_cpus must be positive: Ray places the workers by the CPUs they reserve")
        if start_timeout <= 0 or url_timeout <= 0:
            raise ValueError("start_timeout and url_timeout must be positive numbers of seconds")
        if drain_timeout < 0:
            raise ValueError("drain_timeout must be at least 0 seconds")
        self.auth_token = check_token(auth_token) if auth_token is not None else new_token()
        self.placement = placement
        self.url_timeout = url_timeout
        self.drain_timeout = drain_timeout
        self.start_timeout = start_timeout
        self.cluster_id = uuid.uuid4().hex
        self.actors: list[Any] = []
        self._started: set[int] = set()  # the actors whose worker started: they have a spool
        self._placement_group: PlacementGroup | None = None
        self._more_groups: list[PlacementGroup] = []  # those of workers added by `scale`
        self._made = 0  # actors made so far: each new one's spool folder has a new name
        self._lock = threading.RLock()  # reentrant: a signal's clean-up may interrupt close()
        self._closed = False
        self._owns_ray = not ray.is_initialized()
        # ray.init sets a SIGTERM handler of its own, which ray.shutdown leaves: put back this one
        self._sigterm = signal.getsignal(signal.SIGTERM)
        if self._owns_ray:
            ray.init(address=address)
        # registered after ray.init, so they run before the shutdown Ray registers at exit
        atexit.register(self.close)
        self._exit_key = exits.at_exit_signal(self.close, holds_handlers=True)
        try:
            nodes = len(alive_nodes())
            self.n = n if n is not None else nodes
            self.placement = _resolve_placement(placement, self.n, nodes)
            self._actor_args = (host, session_builder, num_cpus, max_restarts, dict(actor_options or {}))
            self._worker_options = dict(worker_options)
            self._start(self.n)
            self.spool_dirs = self._wait_started(self.actors, start_timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, count: int) -> None:
        """Start `count` more actors (in a placement group of their own when the placement uses one)."""
        host, session_builder, num_cpus, max_restarts, actor_options = self._actor_args
        strategy = PLACEMENTS[self.placement]
        options: dict[str, Any] = {"num_cpus": num_cpus, "max_restarts": max_restarts, **actor_options}
        options["runtime_env"] = runtime_env_handing_back_lazily(options.get("runtime_env"))
        group = None
        if strategy is not None:
            group = placement_group([{"CPU": num_cpus}] * count, strategy=strategy)
            if self._placement_group is None:
                self._placement_group = group
            else:
                self._more_groups.append(group)
        else:
            options.setdefault("scheduling_strategy", "SPREAD")
        actor_class = ray.remote(_RayWorker)
        for i in range(count):
            if group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=i
                )
            spool_name = f"datafusion-distributed-ray-{self.cluster_id}-worker-{self._made}"
            self._made += 1
            self.actors.append(
                actor_class.options(**options).remote(
                    spool_name, host, self.auth_token, session_builder, self._worker_options
                )
            )

    def scale(self, n: int) -> list[bool]:
        """Run `n` workers from now on. New actors start (their workers listen within
        `start_timeout`), and queries take them on as their next stage starts; or the last
        workers are unlisted at once and drained, all together: they take no new task, finish
        their running ones and serve their outputs until released, for up to `drain_timeout`
        seconds, then stop and their actors are killed. Returns, per worker removed, whether it
        drained in time (what did not is recomputed, as for a lost worker).

        Raises:
            ValueError: `n` is below 1.
            RuntimeError: the cluster is closed, or a new worker failed to start.
            TimeoutError: new workers did not start within `start_timeout`.
        """
        if n < 1:
            raise ValueError("a Ray cluster needs at least one worker")
        with self._lock:
            if self._closed:
                raise RuntimeError("the Ray cluster is closed")
            if n > len(self.actors):
                first = len(self.actors)
                self._start(n - first)
                self.spool_dirs += self._wait_started(self.actors[first:], self.start_timeout, first)
                self.n = n
                return []
            leaving = self.actors[n:]
            del self.actors[n:]
            del self.spool_dirs[n:]
            started = {i for i in self._started if i >= n}
            self._started -= started
            self.n = n
        # unlisted above: no query sends them a task from now on (`get_urls` asks the others)
        answers, failures = ask_actors(
            leaving, "drain", self.drain_timeout + STOP_TIMEOUT, self.drain_timeout
        )
        for j, cause in failures.items():
            log.info("Ray worker %d was gone before it could drain: %s", n + j, type(cause).__name__)
        for actor in leaving:
            ray.kill(actor)
        return [bool(answers.get(i, False)) for i in range(len(leaving))]

    def _wait_started(self, actors: list[Any], timeout: float, first: int = 0) -> list[str]:
        """The spool folders of `actors` (indices `first`...), once each was placed and its
        worker listens (at most `timeout` seconds)."""
        answers, failures = ask_actors(actors, "spool", timeout)
        self._started |= {first + i for i in answers}
        if failures:
            i, cause = next(iter(failures.items()))
            raise RuntimeError(f"Ray worker {first + i} failed to start: {cause}") from cause
        if len(answers) < len(actors):
            raise TimeoutError(
                f"{len(actors) - len(answers)} of {len(actors)} Ray workers did not start "
                f"within {timeout}s (placement {self.placement!r}, the Ray cluster has "
                f"{len(alive_nodes())} alive node(s)): strict_spread needs a node per worker, and "
                "each worker needs its num_cpus free"
            )
        return [answers[i] for i in range(len(actors))]

    def get_urls(self) -> list[str]:
        """The workers' URLs, asked of the actors now: the cluster is a resolver. An actor that
        is restarting is waited for (`url_timeout`); one that is dead or does not answer in
        time is left out.

        Raises:
            RuntimeError: the cluster is closed, or no worker answered.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the Ray cluster is closed")
            actors = list(self.actors)
        answers, failures = ask_actors(actors, "url", self.url_timeout)
        for i in range(len(actors)):
            if i in failures:
                log.warning("Ray worker %d is gone, left out: %s", i, type(failures[i]).__name__)
            elif i not in answers:
                log.warning("Ray worker %d did not answer within %ss, left out", i, self.url_timeout)
        if not answers:
            raise RuntimeError(f"none of the {len(actors)} Ray workers answered within {self.url_timeout}s")
        return [answers[i] for i in sorted(answers)]

    def close(self) -> None:
        """Stop the workers, delete their spools and kill their actors, then shut Ray down if
        this cluster started it; closing twice does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if ray.is_initialized():
                self._stop_actors()
            if self._owns_ray and ray.is_initialized():
                ray.shutdown()
                if threading.current_thread() is threading.main_thread() and self._sigterm is not None:
                    signal.signal(signal.SIGTERM, self._sigterm)
        atexit.unregister(self.close)
        exits.forget(self._exit_key)

    def _stop_actors(self) -> None:
        started = sorted(self._started)  # one never placed has nothing to stop
        _, failures = ask_actors([self.actors[i] for i in started], "stop", STOP_TIMEOUT)
        for j, cause in failures.items():  # its spool went with its process or its node
            log.info("Ray worker %d was gone before it could stop: %s", started[j], type(cause).__name__)
        for actor in self.actors:  # one that did not stop in time is killed all the same
            ray.kill(actor)
        for group in [self._placement_group, *self._more_groups]:
            if group is not None:
                remove_placement_group(group)

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ask_actors(
    actors: list[Any], method: str, timeout: float, *args: Any
) -> tuple[dict[int, Any], dict[int, Exception]]:
    """Call `method` (with `args`) on every actor at once and collect the answers by actor
    index, for at most `timeout` seconds. A restarting actor is asked again until it answers; a dead one (or one
    whose method raised) is among the failures, with its error; one that did not answer in time
    is in neither."""
    deadline = time.monotonic() + timeout
    pending = {getattr(actor, method).remote(*args): i for i, actor in enumerate(actors)}
    answers: dict[int, Any] = {}
    failures: dict[int, Exception] = {}
    while pending and (left := deadline - time.monotonic()) > 0:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
        for ref in ready:
            i = pending.pop(ref)
            try:
                answers[i] = ray.get(ref)
            except ray.exceptions.ActorUnavailableError:  # restarting: its new process answers soon
                time.sleep(min(RETRY_PAUSE, max(0.0, deadline - time.monotonic())))
                pending[getattr(actors[i], method).remote(*args)] = i
            except ray.exceptions.RayError as exc:
                failures[i] = exc
    return answers, failures


def _resolve_placement(placement: str, workers: int, nodes: int) -> str:
    """`placement`, with "auto" made "strict_spread" when there is a node per worker, else
    "spread" (several workers share a node rather than wait for nodes that may never come)."""
    if placement != "auto":
        return placement
    if workers <= nodes:
        return "strict_spread"
    log.info("%d Ray workers on %d alive node(s): spread, several to a node", workers, nodes)
    return "spread"


def alive_nodes() -> list[dict[str, Any]]:
    """The nodes of the connected Ray cluster that are alive."""
    return [node for node in ray.nodes() if node.get("Alive")]
