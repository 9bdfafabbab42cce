"""A local S3-API server for the tests: `moto` in server mode on 127.0.0.1.

Nothing leaves the machine: the server keeps its buckets in memory, in this process, and
accepts any credentials. `moto[server]` and `boto3` come with the `dev` extra.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from datafusion_distributed.execution_plans.object_stores import S3Store
from datafusion_distributed.test_utils.tpch import TPCH_TABLES

#: Credentials the test server is given (it accepts any): distinctive, so a test can look for
#: them where they must never appear.
TEST_ACCESS_KEY_ID = "test-access-key-id"
TEST_SECRET_ACCESS_KEY = "test-secret-9c1f4e7a-never-shown"
TEST_REGION = "us-east-1"


class LocalS3Server:
    """An S3-API server on 127.0.0.1 at a free port, from `start()` (or `with`) to `stop()`.

    Examples:
        >>> with LocalS3Server() as s3:
        ...     s3.create_bucket("example-bucket")
        ...     s3.store("example-bucket").url
        's3://example-bucket'
    """

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer  # a dev dependency: imported when used

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""

    def start(self) -> LocalS3Server:
        """Start serving; `endpoint` is then the server's URL."""
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        """Stop serving (its buckets are gone)."""
        self._server.stop()

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=TEST_ACCESS_KEY_ID,
            aws_secret_access_key=TEST_SECRET_ACCESS_KEY,
            region_name=TEST_REGION,
        )

    def storage_options(self) -> dict[str, str]:
        """deltalake's `storage_options` for this server (one writer at a time: no lock service)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": TEST_SECRET_ACCESS_KEY,
            "AWS_REGION": TEST_REGION,
            "AWS_ALLOW_HTTP": "true",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        }

    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for this server."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": TEST_ACCESS_KEY_ID,
            "s3.secret-access-key": TEST_SECRET_ACCESS_KEY,
            "s3.region": TEST_REGION,
        }

    def create_bucket(self, bucket: str) -> None:
        """Make an empty bucket."""
        self.client().create_bucket(Bucket=bucket)

    def store(self, bucket: str) -> S3Store:
        """The S3Store of `bucket` on this server, with the test credentials."""
        return S3Store(
            bucket,
            region=TEST_REGION,
            endpoint=self.endpoint,
            access_key_id=TEST_ACCESS_KEY_ID,
            secret_access_key=TEST_SECRET_ACCESS_KEY,
        )

    def upload_folder(self, folder: str | os.PathLike, bucket: str, prefix: str) -> int:
        """Upload every file under `folder` to `s3://<bucket>/<prefix>/<its relative path>`;
        returns the number of files."""
        client, root, count = self.client(), Path(folder), 0
        for path in sorted(root.rglob("*")):
            if path.is_file():
                client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
                count += 1
        return count

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """The keys of `bucket` under `prefix`, sorted."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def upload_tpch(server: LocalS3Server, tpch: str | os.PathLike, bucket: str, prefix: str = "tpch") -> None:
    """Upload the TPC-H data set at `tpch` (see `tpch_data`) to `s3://<bucket>/<prefix>/<table>/`."""
    for table in TPCH_TABLES:
        server.upload_folder(Path(tpch) / table, bucket, f"{prefix}/{table}")


def register_tpch_s3(ctx: Any, bucket: str, prefix: str = "tpch") -> None:
    """Register the eight TPC-H tables uploaded by `upload_tpch` in `ctx` (a SessionContext or
    a DistributedContext whose store for the bucket is registered)."""
    for table in TPCH_TABLES:
        ctx.register_parquet(table, f"s3://{bucket}/{prefix}/{table}/")
