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


def __getattr__(name: str) -> object:
    """`RayCluster`, imported when first asked for: Ray is an optional extra, and importing it
    costs about a second, so `import datafusion_distributed` never does (nor `import *`: it is
    left out of `__all__`)."""
    if name == "RayCluster":
        from .ray_cluster import RayCluster

        return RayCluster
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
