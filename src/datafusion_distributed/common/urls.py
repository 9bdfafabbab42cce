"""Worker URLs: the Arrow Flight gRPC schemes a worker may be reached by."""

from __future__ import annotations

WORKER_URL_SCHEMES = ("grpc://", "grpc+tcp://", "grpc+tls://")


def is_worker_url(url: str) -> bool:
    """Whether `url` starts with one of WORKER_URL_SCHEMES (nothing else can name a worker)."""
    return url.startswith(WORKER_URL_SCHEMES)
