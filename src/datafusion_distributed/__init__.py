"""Distributed execution for Apache DataFusion: run ordinary DataFusion queries across many workers.

The public names are imported when first used: `import datafusion_distributed` alone imports
nothing heavy, so that the command line can start a worker with the modules it needs only, and
import DataFusion its own way first (see `common.lean_imports`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api.context import DistributedContext
    from .api.dataframe import DistributedDataFrame
    from .clusters.embedded import EmbeddedCluster
    from .clusters.local import LocalCluster
    from .clusters.ray import RayCluster as RayCluster  # a re-export, left out of __all__
    from .common.version import __version__
    from .distributed_planner.config import DistributedConfig
    from .errors import (
        ContextClosed,
        ExtensionError,
        FeedFailed,
        QueryCancelled,
        QueryFailed,
        QueryTimedOut,
        ResultStreamLost,
        WorkerDraining,
        WorkerError,
        WorkersNotFound,
        WorkersUnavailable,
        WorkerTimeout,
        WorkerUnreachable,
    )
    from .execution_plans.object_stores import S3Store
    from .protocol.resolver import DnsResolver, EnvResolver, StaticResolver, WorkerResolver
    from .work_unit_feed import WorkUnitFeed, read_units
    from .worker.flight_worker import FlightWorker

# Every public name, and the module that defines it.
_MODULE_OF = {
    "EmbeddedCluster": ".clusters.embedded",
    "LocalCluster": ".clusters.local",
    "__version__": ".common.version",
    "QueryCancelled": ".errors",
    "QueryTimedOut": ".errors",
    "DistributedConfig": ".distributed_planner.config",
    "DistributedContext": ".api.context",
    "DistributedDataFrame": ".api.dataframe",
    "ContextClosed": ".errors",
    "ExtensionError": ".errors",
    "FeedFailed": ".errors",
    "QueryFailed": ".errors",
    "ResultStreamLost": ".errors",
    "S3Store": ".execution_plans.object_stores",
    "WorkerDraining": ".errors",
    "WorkerError": ".errors",
    "WorkerTimeout": ".errors",
    "WorkerUnreachable": ".errors",
    "DnsResolver": ".protocol.resolver",
    "EnvResolver": ".protocol.resolver",
    "StaticResolver": ".protocol.resolver",
    "WorkerResolver": ".protocol.resolver",
    "WorkersNotFound": ".errors",
    "WorkersUnavailable": ".errors",
    # Ray is an optional extra, and importing it costs about a second: `RayCluster` is left out
    # of `__all__`, so that `import *` never imports it.
    "RayCluster": ".clusters.ray",
    "WorkUnitFeed": ".work_unit_feed",
    "read_units": ".work_unit_feed",
    "FlightWorker": ".worker.flight_worker",
}


def __getattr__(name: str) -> object:
    """A public name, imported from its module the first time it is asked for."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # asked for once
    return value


def __dir__() -> list[str]:
    """The module's names, public ones included before they are first used."""
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = [
    "ContextClosed",
    "DistributedConfig",
    "DistributedContext",
    "DistributedDataFrame",
    "DnsResolver",
    "EmbeddedCluster",
    "EnvResolver",
    "ExtensionError",
    "FeedFailed",
    "FlightWorker",
    "LocalCluster",
    "QueryCancelled",
    "QueryFailed",
    "QueryTimedOut",
    "ResultStreamLost",
    "S3Store",
    "StaticResolver",
    "WorkerDraining",
    "WorkerError",
    "WorkerResolver",
    "WorkerTimeout",
    "WorkUnitFeed",
    "WorkerUnreachable",
    "WorkersNotFound",
    "WorkersUnavailable",
    "__version__",
    "read_units",
]
