"""Handlers users supply to choose task counts and task placement, rewrite task plans on
workers, re-plan stages from their inputs' real sizes, and hear of distributed events (query,
stage and task started, finished, failed, adapted; worker unreachable). See `chain` for how
they are asked, `handlers` for what they are given and `defaults` for the built-in policies."""

from .chain import HandlerChain
from .defaults import InputSizeAdaptation, RoundRobinRouting, ScanSizeTaskCount
from .handlers import (
    Adaptation,
    AdaptiveDecision,
    AdaptRequest,
    DistributedHandler,
    Event,
    EventKind,
    PlanRewriteRequest,
    RoutingRequest,
    TaskCount,
    TaskCountRequest,
)

__all__ = [
    "Adaptation",
    "AdaptiveDecision",
    "AdaptRequest",
    "DistributedHandler",
    "Event",
    "EventKind",
    "HandlerChain",
    "InputSizeAdaptation",
    "PlanRewriteRequest",
    "RoundRobinRouting",
    "RoutingRequest",
    "ScanSizeTaskCount",
    "TaskCount",
    "TaskCountRequest",
]
