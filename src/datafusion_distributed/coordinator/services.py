"""What a query's run takes from the context that started it: the long-lived services every run
of the context shares, and the options of this one run, read from the config it was planned
with (a `SET` while it runs changes the next query, never this one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..distributed_planner.config import QueryPlanConfig
from ..protocol.flight import ClientPool
from ..runtime.session import task_session
from ..runtime.session_settings import TaskSessions
from ..work_unit_feed.service import FeedService
from .liveness import LivenessMonitor
from .membership import Membership
from .stragglers import StragglerRule


@dataclass(frozen=True)
class RunServices:
    """The coordinator's services a run uses.

    Attributes:
        clients: connections to the workers.
        liveness: the probes of the workers in use (a run makes its own if None).
        feeds: the service the tasks of work-unit feeds ask for units (None: no feed runs).
        head_sessions: the sessions the head stage runs in (see `TaskSessions`).
        local_spools: workers' spools this process reads in place (a cluster on this host).
        membership: the resolver's answers, asked again as each stage starts (None: the
            workers the run was given, throughout).
    """

    clients: ClientPool
    liveness: LivenessMonitor | None = None
    feeds: FeedService | None = None
    head_sessions: TaskSessions = field(default_factory=lambda: TaskSessions(task_session))
    local_spools: tuple[str, ...] = ()
    membership: Membership | None = None


@dataclass(frozen=True)
class RunOptions:
    """How one run goes, fixed when its query was planned.

    Attributes:
        compression: the codec of exchange files (None: uncompressed).
        task_attempts: how many times a task is tried before the query fails.
        query_timeout: seconds the query may run (None: no limit).
        adaptive: the query's planning config when its stages are re-planned from their
            inputs' sizes as they run (`distributed_planner.adaptive`); None when they run as
            planned.
        speculation: when stragglers get a second attempt on another worker (see
            `coordinator.speculation`); None when they do not.
        worker_refresh_seconds: how old the resolver's answer may be when a stage starts
            before it is asked again (see `coordinator.membership`).
    """

    compression: str | None = "lz4"
    task_attempts: int = 3
    query_timeout: float | None = None
    adaptive: QueryPlanConfig | None = None
    speculation: StragglerRule | None = None
    worker_refresh_seconds: float = 1.0
