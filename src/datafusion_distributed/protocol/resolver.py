"""Worker resolution: any object with `get_urls() -> list[str]` tells a coordinator its workers."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..common.urls import WORKER_URL_SCHEMES, is_worker_url

WORKERS_ENV = "DATAFUSION_DISTRIBUTED_WORKERS"


@runtime_checkable
class WorkerResolver(Protocol):
    """Anything that lists the worker URLs a coordinator may use; asked at every query."""

    def get_urls(self) -> list[str]:
        """The worker URLs (`grpc://`, `grpc+tcp://` or `grpc+tls://`)."""
        ...


_SCHEMES_TEXT = f"{', '.join(WORKER_URL_SCHEMES[:-1])} or {WORKER_URL_SCHEMES[-1]}"


def _check_url(url: str) -> str:
    url = url.strip()
    if not is_worker_url(url):
        raise ValueError(f"worker URL {url!r} must start with {_SCHEMES_TEXT}")
    return url


class StaticResolver:
    """A fixed list of worker URLs."""

    def __init__(self, urls: Sequence[str]):
        if not urls:
            raise ValueError("at least one worker URL is needed")
        self._urls = [_check_url(u) for u in urls]

    def get_urls(self) -> list[str]:
        """The URLs given, checked once when the resolver was made."""
        return list(self._urls)


class EnvResolver:
    """Worker URLs from the comma-separated environment variable DATAFUSION_DISTRIBUTED_WORKERS,
    read at every query so a changed variable takes effect."""

    def __init__(self, variable: str = WORKERS_ENV):
        self.variable = variable

    def get_urls(self) -> list[str]:
        """The URLs in the variable now; ValueError when it lists none or one is not a worker URL."""
        raw = os.environ.get(self.variable, "")
        urls = [u for u in raw.split(",") if u.strip()]
        if not urls:
            raise ValueError(f"environment variable {self.variable} lists no worker URLs")
        return [_check_url(u) for u in urls]
