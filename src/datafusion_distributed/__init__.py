"""Distributed execution for Apache DataFusion: run ordinary DataFusion queries across many workers."""

__version__ = "0.1.0"

__all__ = ["__version__"]
