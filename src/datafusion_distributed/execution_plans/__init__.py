"""The distributed plan types (stages, tasks, boundaries) and how they display."""

from .display import display_distributed_plan, display_stage

__all__ = ["display_distributed_plan", "display_stage"]
