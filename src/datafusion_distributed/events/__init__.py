"""Handlers users supply to react to distributed events (task started, finished, failed, worker lost)."""
