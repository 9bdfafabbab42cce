"""A run's work-unit feeds: ready before the stages start, handed to each task attempt that
reads one, and the units each attempt read kept (committed) or given back (abandoned)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import cloudpickle

from ..errors import QueryFailed
from ..execution_plans.stage import Stage, TaskPlan
from ..protocol.messages import FeedTask
from ..work_unit_feed.dispatch import FeedRun
from ..work_unit_feed.reading import scan_fields
from .run_state import RunState


class RunFeeds:
    """The feeds of one run. Every method is a no-op for a stage that reads no feed."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self._readers: dict[str, bytes] = {}  # each feed's reader, pickled once for its tasks

    @property
    def run(self) -> FeedRun:
        """The units of the plan's feeds (started by `start`)."""
        if self.state.feeds is None:
            raise RuntimeError("the run's feeds have not started")
        return self.state.feeds

    def start(self) -> None:
        """Get the units of the plan's feeds ready to hand out (their providers start as the
        first task asks), served to workers when tasks run there."""
        plan, service = self.state.plan, self.state.services.feeds
        if not plan.feeds:
            return
        if service is None:
            raise QueryFailed("the plan reads a work-unit feed, but the run was given no feed service")
        if plan.is_distributed and feed_would_leak_token(service.host, self.state.workers):
            raise QueryFailed(
                "the plan reads a work-unit feed, and the workers are reached over TLS, but the "
                f"coordinator's feed service serves plain gRPC on {service.host}: workers would "
                "send it the cluster's token unencrypted. Run the workers where they reach the "
                "coordinator on loopback (feed_host 127.0.0.1), or read the data as a table"
            )
        try:
            self.state.feeds = service.start(self.state.query_id, plan.feeds, serve=plan.is_distributed)
        except LookupError as exc:
            raise QueryFailed(str(exc)) from exc

    def tasks(self, stage: Stage, task: TaskPlan) -> tuple[FeedTask, ...]:
        """The feed scans of a new attempt of `task`, asking for units with a token of its own.
        Called where attempts are started, never from a task's thread."""
        if not stage.feeds:
            return ()
        token = self.run.begin(stage.id, task.index)
        service = self.state.services.feeds
        assert service is not None  # `start` checked it
        count = len(self.state.tasks_of(stage))
        return tuple(
            FeedTask(
                url=service.url,
                token=token,
                reader=self._reader(scan.scan_id),
                partitions=scan.task_partitions(task.index, count),
                rounds=scan.rounds,
                connect_timeout=self.state.services.clients.settings.timeout,
                **scan_fields(scan),
            )
            for scan in stage.feeds
        )

    def _reader(self, scan_id: int) -> bytes:
        feed = self.run.feed_of(scan_id)
        if feed.id not in self._readers:
            try:
                self._readers[feed.id] = cloudpickle.dumps(feed.reader)
            except Exception as exc:  # pickling raises anything its objects raise
                raise QueryFailed(
                    f"the reader of feed {feed.name!r} cannot be pickled to travel to the workers: {exc}"
                ) from exc
        return self._readers[feed.id]

    def commit(self, stage: Stage, index: int) -> int:
        """Keep the units task `index` of `stage` read (they are its own from now on); returns
        how many."""
        if not stage.feeds:
            return 0
        self.run.commit(stage.id, index)
        return self.run.units_per_task(stage.id).get(index, 0)

    def abandon(self, stage: Stage, index: int) -> None:
        """Give back the units of a failed attempt, for the others or its next try."""
        if stage.feeds:
            self.run.abandon(stage.id, index)

    def finish_stage(self, stage: Stage) -> None:
        """Record the units each task of the finished `stage` read."""
        if stage.feeds:
            self.state.metrics.feed_units[stage.id] = self.run.units_per_task(stage.id)

    def finish(self) -> None:
        """Stop the providers, whatever happened."""
        if self.state.feeds is not None and self.state.services.feeds is not None:
            self.state.services.feeds.finish(self.state.feeds)


def feed_would_leak_token(feed_host: str, workers: Sequence[str]) -> bool:
    """Whether workers reached over TLS would ask a feed service that is not on loopback (it
    serves plain gRPC, and every call carries the cluster's token)."""
    if not any(url.startswith("grpc+tls://") for url in workers):
        return False
    try:
        return not ipaddress.ip_address(feed_host).is_loopback
    except ValueError:  # a host name
        return feed_host != "localhost"
