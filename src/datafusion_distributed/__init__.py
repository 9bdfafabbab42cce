"""Distributed execution for Apache DataFusion: run ordinary DataFusion queries across many workers."""

from .clusters import EmbeddedCluster, LocalCluster
from .common.version import __version__
from .coordinator.cancellation import QueryCancelled, QueryTimedOut
from .coordinator.config import DistributedConfig
from .coordinator.context import DistributedContext
from .coordinator.dataframe import DistributedDataFrame
from .coordinator.errors import ContextClosed, FeedFailed, QueryFailed, ResultStreamLost
from .protocol.flight import WorkerError, WorkerTimeout, WorkerUnreachable
from .protocol.resolver import EnvResolver, StaticResolver, WorkerResolver
from .work_unit_feed import WorkUnitFeed, read_units
from .worker.flight_worker import FlightWorker

__all__ = [
    "ContextClosed",
    "DistributedConfig",
    "DistributedContext",
    "DistributedDataFrame",
    "EmbeddedCluster",
    "EnvResolver",
    "FeedFailed",
    "FlightWorker",
    "LocalCluster",
    "QueryCancelled",
    "QueryFailed",
    "QueryTimedOut",
    "ResultStreamLost",
    "StaticResolver",
    "WorkerError",
    "WorkerResolver",
    "WorkerTimeout",
    "WorkUnitFeed",
    "WorkerUnreachable",
    "__version__",
    "read_units",
]
