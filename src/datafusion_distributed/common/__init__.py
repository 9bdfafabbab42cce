"""Standalone helpers coupled to nothing else in the package."""
