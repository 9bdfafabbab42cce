"""Distributed execution for Apache DataFusion: run ordinary DataFusion queries across many workers."""

__version__ = "0.1.0"

from .coordinator.cancellation import QueryCancelled, QueryTimedOut  # noqa: E402
from .coordinator.clusters import EmbeddedCluster, LocalCluster  # noqa: E402
from .coordinator.config import DistributedConfig  # noqa: E402
from .coordinator.context import DistributedContext  # noqa: E402
from .coordinator.dataframe import DistributedDataFrame  # noqa: E402
from .coordinator.errors import QueryFailed  # noqa: E402
from .protocol.flight import WorkerError, WorkerTimeout, WorkerUnreachable  # noqa: E402
from .protocol.resolver import EnvResolver, StaticResolver, WorkerResolver  # noqa: E402
from .worker.flight_worker import FlightWorker  # noqa: E402

__all__ = [
    "DistributedConfig",
    "DistributedContext",
    "DistributedDataFrame",
    "EmbeddedCluster",
    "EnvResolver",
    "FlightWorker",
    "LocalCluster",
    "QueryCancelled",
    "QueryFailed",
    "QueryTimedOut",
    "StaticResolver",
    "WorkerError",
    "WorkerResolver",
    "WorkerTimeout",
    "WorkerUnreachable",
    "__version__",
]
