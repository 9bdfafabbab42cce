"""Coordinator-worker messages, worker resolution and the Arrow Flight transport."""
