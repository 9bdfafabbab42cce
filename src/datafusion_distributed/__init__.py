"""Distributed execution for Apache DataFusion: run ordinary DataFusion queries across many workers."""

from .clusters import EmbeddedCluster, LocalCluster
from .common.version import __version__
from .coordinator.cancellation import QueryCancelled, QueryTimedOut
from .coordinator.config import DistributedConfig
from .coordinator.context import DistributedContext
from .coordinator.dataframe import DistributedDataFrame
from .coordinator.errors import ContextClosed, FeedFailed, QueryFailed, ResultStreamLost
from .execution_plans.object_stores import S3Store
from .protocol.flight import WorkerError, WorkerTimeout, WorkerUnreachable
from .protocol.resolver import DnsResolver, EnvResolver, StaticResolver, WorkerResolver, WorkersNotFound
from .work_unit_feed import WorkUnitFeed, read_units
from .worker.flight_worker import FlightWorker

__all__ = [
    "ContextClosed",
    "DistributedConfig",
    "DistributedContext",
    "DistributedDataFrame",
    "DnsResolver",
    "EmbeddedCluster",
    "EnvResolver",
    "FeedFailed",
    "FlightWorker",
    "LocalCluster",
    "QueryCancelled",
    "QueryFailed",
    "QueryTimedOut",
    "ResultStreamLost",
    "S3Store",
    "StaticResolver",
    "WorkerError",
    "WorkerResolver",
    "WorkerTimeout",
    "WorkUnitFeed",
    "WorkerUnreachable",
    "WorkersNotFound",
    "__version__",
    "read_units",
]
