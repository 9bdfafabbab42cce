"""Handlers users supply to choose task counts and task placement, rewrite task plans on
workers, and hear of distributed events (query, stage and task started, finished, failed;
worker unreachable). See `handlers` for the chain and `defaults` for the built-in policies."""

from .defaults import RoundRobinRouting, ScanSizeTaskCount
from .handlers import (
    DistributedHandler,
    Event,
    EventKind,
    HandlerChain,
    PlanRewriteRequest,
    RoutingRequest,
    TaskCount,
    TaskCountRequest,
)

__all__ = [
    "DistributedHandler",
    "Event",
    "EventKind",
    "HandlerChain",
    "PlanRewriteRequest",
    "RoundRobinRouting",
    "RoutingRequest",
    "ScanSizeTaskCount",
    "TaskCount",
    "TaskCountRequest",
]
