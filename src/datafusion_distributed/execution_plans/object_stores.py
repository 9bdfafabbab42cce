"""The object stores a query's tasks read from and write to, described so they can travel.

A plan names its files by URL (`s3://bucket/key`) and DataFusion finds the store for a URL in
the session's runtime. DataFusion's own store objects (`datafusion.object_store.AmazonS3`) cannot
be read back once made, so they cannot be sent to a worker (a query reading through one runs on
one node, in the user's context); an `S3Store` is the description the library sends with each
task instead, and each session a task runs in (a worker's, the coordinator's head stage) builds
and registers the same store from it.

An `S3Store` holds credentials only when they are given explicitly. They travel inside the task
messages (use TLS between machines) and are never shown: not by `repr`, `str`, `explain()`, logs,
or error messages. What a description leaves out (keys, region, endpoint) is taken by each
process that builds the store from its own `AWS_*` environment variables, as DataFusion does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from datafusion import SessionContext
from datafusion.object_store import AmazonS3

MAX_STORES = 64  # stores one query may carry
MAX_TEXT_CHARS = 4096  # any one setting of a store
# S3's bucket naming rules (3 to 63 lower-case letters, digits, dots and hyphens), which also
# keep the URL `s3://<bucket>` a plain host name DataFusion parses.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class S3Store:
    """An S3 (or S3-API) bucket the library registers as DataFusion's `AmazonS3` store in every
    session a query's tasks run in: the coordinator's and each worker's.

    Register it with `DistributedContext.register_object_store("s3://<bucket>", store)`.
    Settings left as None come from the environment of the process that builds the store (its
    `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
    `AWS_ENDPOINT_URL`, ..., or the instance's role), so a worker may use its own credentials.

    Args:
        bucket: the bucket's name; the store serves the URLs `s3://<bucket>/...`.
        region: the bucket's region, e.g. "eu-west-1".
        endpoint: the URL of an S3-API server other than AWS (MinIO, a local test server).
        access_key_id, secret_access_key, session_token: explicit credentials. They travel
            with every task of a query and are never shown (repr, explain, logs, errors).
        allow_http: allow an `http://` endpoint; None means: when `endpoint` starts with
            `http://`.

    Examples:
        >>> S3Store("my-bucket", region="eu-west-1", access_key_id="AKIA", secret_access_key="x")
        S3Store(bucket='my-bucket', region='eu-west-1', credentials='given')
    """

    bucket: str
    region: str | None = None
    endpoint: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    allow_http: bool | None = None

    def __post_init__(self) -> None:
        check_store(self)

    @property
    def url(self) -> str:
        """The URL DataFusion finds this store by: `s3://<bucket>`."""
        return f"s3://{self.bucket}"

    @property
    def http_allowed(self) -> bool:
        """Whether the store may use plain HTTP (see `allow_http`)."""
        if self.allow_http is not None:
            return self.allow_http
        return self.endpoint is not None and self.endpoint.startswith("http://")

    @property
    def credentials(self) -> str:
        """Where the credentials come from, for display: "given", or "from the environment"."""
        given = self.access_key_id is not None or self.secret_access_key is not None
        return "given" if given else "from the environment"

    def __repr__(self) -> str:
        shown = [f"bucket={self.bucket!r}"]
        shown += [f"{name}={getattr(self, name)!r}" for name in ("region", "endpoint", "allow_http")]
        shown = [item for item in shown if not item.endswith("=None")]
        return f"S3Store({', '.join(shown)}, credentials={self.credentials!r})"

    __str__ = __repr__

    def describe(self) -> str:
        """The store in one line without its credentials, for `explain()`."""
        where = f"endpoint {self.endpoint}" if self.endpoint else "AWS"
        region = f", region {self.region}" if self.region else ""
        return f"{self.url} ({where}{region}, credentials {self.credentials})"

    def build(self) -> AmazonS3:
        """DataFusion's store for this description (settings left out come from the environment)."""
        return AmazonS3(
            bucket_name=self.bucket,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
            session_token=self.session_token,
            endpoint=self.endpoint,
            allow_http=self.http_allowed,
        )

    def register(self, ctx: SessionContext) -> None:
        """Register this store in `ctx`'s runtime, for the URLs `s3://<bucket>/...`."""
        ctx.register_object_store("s3://", self.build(), self.bucket)


ObjectStores = tuple[S3Store, ...]  # sorted by URL, one store per URL


def check_store(store: S3Store) -> S3Store:
    """`store` if every setting is well formed, else ValueError naming the setting (never
    showing a credential's value)."""
    if not isinstance(store.bucket, str) or not _BUCKET.match(store.bucket):
        raise ValueError(
            f"S3 bucket name {str(store.bucket)[:80]!r} is not valid: 3 to 63 lower-case letters, "
            "digits, dots and hyphens, starting and ending with a letter or digit"
        )
    for name in ("region", "endpoint", "access_key_id", "secret_access_key", "session_token"):
        value = getattr(store, name)
        if value is not None and (not isinstance(value, str) or not value or len(value) > MAX_TEXT_CHARS):
            raise ValueError(f"S3 store {name} must be None or text of 1 to {MAX_TEXT_CHARS} characters")
    if store.endpoint is not None and not store.endpoint.startswith(("http://", "https://")):
        raise ValueError(f"S3 endpoint {store.endpoint[:200]!r} must start with http:// or https://")
    if (store.access_key_id is None) != (store.secret_access_key is None):
        raise ValueError("S3 credentials need both access_key_id and secret_access_key, or neither")
    if store.session_token is not None and store.access_key_id is None:
        raise ValueError("an S3 session_token needs access_key_id and secret_access_key too")
    if store.allow_http not in (None, True, False):
        raise ValueError("S3 store allow_http must be None, True or False")
    return store


def store_for_url(url: str, store: Any) -> S3Store:
    """`store` if it serves `url` (`s3://<bucket>` or `s3://<bucket>/`), else a ValueError or
    TypeError saying what a store registered through the library must be."""
    if not isinstance(store, S3Store):
        raise TypeError(
            "DistributedContext.register_object_store takes an S3Store, which every worker can "
            f"rebuild, not {type(store).__module__}.{type(store).__name__}: DataFusion's stores cannot "
            "be read back to send them. Register other stores on each worker in a session hook, "
            "or on the SessionContext alone (DistributedContext.ctx.register_object_store), where "
            "queries reading them run on one node (see docs/object-stores.md)"
        )
    if url.rstrip("/") != store.url:
        raise ValueError(f"the S3Store of bucket {store.bucket!r} serves {store.url}, not {url[:200]!r}")
    return store


def with_store(stores: ObjectStores, store: S3Store) -> ObjectStores:
    """`stores` with `store` added, replacing the one of the same URL, sorted by URL."""
    kept = {s.url: s for s in stores}
    kept[store.url] = store
    if len(kept) > MAX_STORES:
        raise ValueError(f"a context holds at most {MAX_STORES} object stores")
    return tuple(kept[url] for url in sorted(kept))


def bucket_of(url: str) -> str | None:
    """The bucket an `s3://` URL names, or None for any other URL."""
    parsed = urlparse(url)
    return parsed.netloc if parsed.scheme == "s3" else None


def register_stores(ctx: SessionContext, stores: ObjectStores) -> None:
    """Register every store of `stores` in `ctx`'s runtime."""
    for store in stores:
        store.register(ctx)


_NO_STORE = "No suitable object store found for"


def with_store_hint(message: str) -> str:
    """`message`, a task's error, with what to do added when DataFusion found no object store
    for a URL: the session the task ran in (a worker's, or the coordinator's head stage) has
    no store for it, as a store registered only on the user's SessionContext stays there."""
    if _NO_STORE not in message:
        return message
    return (
        f"{message}\n(the session this task ran in has no object store for that URL: register it "
        "with DistributedContext.register_object_store(url, S3Store(...)) so it travels with each "
        "task, or on every worker in a session hook; see docs/object-stores.md)"
    )
