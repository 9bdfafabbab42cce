"""A session hook: how a worker builds the SessionContext its tasks run in.

    datafusion-distributed worker --port 50051 --session-hook session_hook:build_session

(run from the examples/ folder, or with examples/ on PYTHONPATH, so `session_hook` imports).
The worker calls the hook once, when its first task arrives, with a SessionConfig that already
holds the settings every task needs, and runs all its tasks in the context it returns: register
object stores the library does not send (see docs/object-stores.md), UDFs or more settings there. The coordinator uses the same kind of hook for the
stage it runs itself (once per query):
`DistributedContext(ctx, workers=..., session_builder=build_session)`.
"""

from __future__ import annotations

import logging

from datafusion import SessionConfig, SessionContext

log = logging.getLogger("session_hook")


def build_session(config: SessionConfig) -> SessionContext:
    config = config.with_batch_size(16384)
    ctx = SessionContext(config)
    # Stores the library does not send are registered here, for example:
    #   from datafusion.object_store import GoogleCloud
    #   ctx.register_object_store("gs://", GoogleCloud(bucket_name="my-bucket"), "my-bucket")
    log.info("worker session built (batch size 16384)")
    return ctx
