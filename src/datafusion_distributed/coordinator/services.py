"""What a query's run takes from the context that started it: the long-lived services every run
of the context shares. The settings of the run are those of the config its query was planned
with (`QueryPlanConfig`: a `SET` while it runs changes the next query, never this one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..protocol.flight import ClientPool
from ..runtime.session import task_session
from ..runtime.session_settings import TaskSessions
from ..work_unit_feed.service import FeedService
from .liveness import LivenessMonitor
from .membership import Membership


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
        in_process: every worker runs in this process (the embedded cluster): exchanges
            between them may stream (see `streaming`).
        data_plane: the host:port a worker serves its streamed exchanges on (raises
            WorkerUnreachable for a worker that serves none); None: no stream crosses processes.
    """

    clients: ClientPool
    liveness: LivenessMonitor | None = None
    feeds: FeedService | None = None
    head_sessions: TaskSessions = field(default_factory=lambda: TaskSessions(task_session))
    local_spools: tuple[str, ...] = ()
    membership: Membership | None = None
    in_process: bool = False
    data_plane: Callable[[str], str] | None = None


def exchange_compression(setting: str | None, read_in_place: bool) -> str | None:
    """The codec of exchange files under the `compression` setting: with "auto", none when
    they are read in place (no copy to save, and compressing costs CPU), lz4 when they cross
    the network."""
    if setting != "auto":
        return setting
    return None if read_in_place else "lz4"
