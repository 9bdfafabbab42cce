"""The library's version, reported by workers' health checks and the package."""

__version__ = "0.1.0"
