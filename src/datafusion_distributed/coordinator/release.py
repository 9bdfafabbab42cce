"""The end of a query, or of one attempt, on the workers: its spool data deleted, its late
tasks stopped."""

from __future__ import annotations

import logging
from concurrent.futures import wait

from ..common.threads import kept_threads
from ..errors import WORKER_ERRORS
from ..protocol.messages import TaskKey
from .cancellation import POLL_SECONDS
from .run_state import RunState
from .shipping import TableShipper

log = logging.getLogger("datafusion_distributed.coordinator")


def release_query(state: RunState, shipper: TableShipper) -> None:
    """Delete this query's data on the workers it ran tasks on, all at once. A query run
    wholly in the coordinator calls no worker. Lost workers are sent it too, in the
    background (one may have come back), without waiting; their TTL sweep is the backstop.

    Sent as `cancel`, which also stops any task of the query still running (after an error,
    a cancellation or an early close) and refuses late ones. The workers stay probed until
    every call has answered: one that stops answering meanwhile (frozen after its last task)
    is given up on once lost to liveness, as during the query, rather than after
    `connect_timeout`; its call goes on in the background."""
    try:
        shipper.discard()
        for url in sorted(state.contacted & state.dead):
            kept_threads.submit(_cancel_on, state, url)  # bounded by connect_timeout; errors ignored
        calls = {
            kept_threads.submit(_cancel_on, state, url): url for url in sorted(state.contacted - state.dead)
        }
        pending = set(calls)
        while pending:
            done, pending = wait(pending, timeout=POLL_SECONDS)
            for call in done:
                if (error := call.result()) is not None:
                    log.warning("could not release query %s on %s: %s", state.query_id, calls[call], error)
            for call in [c for c in pending if state.liveness.lost(calls[c])]:
                pending.discard(call)  # left to finish (or time out) in the background
                log.warning(
                    "could not release query %s on %s: %s",
                    state.query_id,
                    calls[call],
                    state.liveness.unreachable(calls[call]),
                )
    finally:
        state.liveness.forget(state.query_id)


def _cancel_on(state: RunState, url: str) -> Exception | None:
    try:
        state.services.clients.get(url).cancel(state.query_id)
    except WORKER_ERRORS as exc:
        return exc
    return None


def stop_attempt(state: RunState, worker: str, key: TaskKey) -> None:
    """Stop an attempt given up on (a speculative race lost, inputs on a lost worker) and delete
    its outputs, in the background: whatever it does late is never read (a retry is numbered
    apart), and the query's release deletes its data anyway."""

    def stop() -> None:
        try:
            state.services.clients.get(worker).cancel_attempt(key)
        except Exception as exc:  # a worker lost meanwhile: its data goes with the query's release
            log.debug(
                "could not stop attempt %d of stage %d task %d on %s: %s",
                *(key.attempt, key.stage, key.task, worker, exc),
            )

    kept_threads.submit(stop)
