"""Handlers users supply to choose task counts and task placement, rewrite task plans on
workers, and hear of distributed events (query, stage and task started, finished, failed;
worker unreachable). See `chain` for how they are asked, `handlers` for what they are given and
`defaults` for the built-in policies."""

from .chain import HandlerChain
from .defaults import RoundRobinRouting, ScanSizeTaskCount
from .handlers import (
    DistributedHandler,
    Event,
    EventKind,
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
