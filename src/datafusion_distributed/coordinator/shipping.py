"""Ship a query's large memory tables to its workers once, as data, before its stages run.

A memory table (`from_pandas`, `register_record_batches`, a MemTable) travels inside the plan
bytes of every task that reads it; the planner turns one larger than
`memory_table_inline_bytes` into an input of its consumer (a `ShippedTable`), and this module
provides that input as if a producer stage of one task had written it: one Arrow IPC file per
partition of the table's scan, run here from the in-memory plan. When the workers share this
host's spool root (a cluster the library started) the files are written there, where workers
read them in place; otherwise each partition is uploaded once, to one worker's spool (`do_put`),
from where the consumers fetch it like any task output. Lost, that worker's copy is uploaded
again elsewhere (the coordinator still has the table); the query's release deletes it all.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..common import exits
from ..errors import WORKER_ERRORS
from ..execution_plans.stage import ShippedTable
from ..protocol.messages import PartitionResult, ShipPartition, TaskResult
from ..runtime.outputs import write_task_outputs
from ..runtime.streaming import stream_partition
from .run_state import RunState

log = logging.getLogger("datafusion_distributed.coordinator")


class TableShipper:
    """Provides the shipped memory tables of one query run as producer outputs
    (`run.results` and `run.placement` under each table's id)."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self._folder: str | None = None  # where tables are written in place, made on first use
        self._exit_key: int | None = None
        self._lock = threading.Lock()

    def ship_all(self) -> None:
        """Ship every memory table of the plan that is not shipped yet."""
        for table in self.run.plan.tables:
            if table.id not in self.run.results:
                self._ship(table)

    def reship_lost(self) -> None:
        """Upload again every table whose copy was on a worker found lost since."""
        run = self.run
        if run.services.local_spools:
            return  # written on this host: no worker holds them
        for table in run.plan.tables:
            holder = run.placement.get(table.id, [None])[0]
            if table.id in run.results and holder in run.dead:
                log.info("memory table %d was on lost worker %s: shipping it again", table.id, holder)
                self._ship(table)

    def discard(self) -> None:
        """Delete the tables written on this host (uploaded ones go with the query's release)."""
        with self._lock:
            folder, self._folder = self._folder, None
            key, self._exit_key = self._exit_key, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if key is not None:
            exits.forget(key)

    # -- writing ------------------------------------------------------------------------------
    def _ship(self, table: ShippedTable) -> None:
        run = self.run
        started = time.perf_counter()
        session, scan = self._scan(table)
        if run.services.local_spools:
            # read in place by every worker: the holder named is never asked for them
            result, holder = self._write_here(table, session, scan), run.workers[0]
        else:
            result, holder = self._upload(table, session, scan)
        run.results[table.id] = [result]
        run.placement[table.id] = [holder]
        log.info(
            "shipped memory table %d (%d rows, %d bytes) %s in %.3fs",
            table.id,
            sum(p.rows for p in result.partitions),
            sum(p.bytes for p in result.partitions),
            "to this host's spools" if run.services.local_spools else f"to {holder}",
            time.perf_counter() - started,
        )

    def _scan(self, table: ShippedTable) -> tuple[SessionContext, ExecutionPlan]:
        """The table's scan and the session to run it in: found in the in-memory plan by its
        path (no copy of the data), or rebuilt from its bytes when the run has no such plan."""
        plan = self.run.plan
        if plan.physical is not None and plan.session is not None:
            node: ExecutionPlan | None = plan.physical
            try:
                for index in table.path:
                    node = node.children()[index] if node is not None else None
            except IndexError:
                node = None
            if node is not None and node.display().startswith("DataSourceExec"):
                return plan.session, node
        session = self.run.head_session()
        return session, ExecutionPlan.from_bytes(session, table.scan)

    def _write_here(self, table: ShippedTable, session: SessionContext, scan: ExecutionPlan) -> TaskResult:
        """Write the table's partitions into this host's shared spool root: read in place."""
        run = self.run
        started = time.perf_counter()
        folder = os.path.join(self._local_folder(), f"table-{table.id}")
        output = write_task_outputs(
            session, scan, folder, run.compression, cancelled=lambda: run.cancel_scope.cancelled
        )
        run.cancel_scope.check()
        partitions = tuple(PartitionResult(p.partition, p.rows, p.bytes, p.path) for p in output.partitions)
        return TaskResult(partitions, output.schema, time.perf_counter() - started, 0)

    def _local_folder(self) -> str:
        with self._lock:
            if self._folder is None:
                self._folder = tempfile.mkdtemp(
                    prefix="coordinator-tables-", dir=self.run.services.local_spools[0]
                )
                self._exit_key = exits.at_exit_signal(
                    functools.partial(shutil.rmtree, self._folder, ignore_errors=True)
                )
            return self._folder

    def _upload(
        self, table: ShippedTable, session: SessionContext, scan: ExecutionPlan
    ) -> tuple[TaskResult, str]:
        """Upload the table to one live worker, another one when that one is lost."""
        run = self.run
        for attempt in itertools.count(1):
            worker = self._any_worker(table, attempt)
            try:
                return self._upload_to(worker, table, session, scan), worker
            except WORKER_ERRORS as exc:
                run.retry.after_failure(exc, attempt, f"shipping memory table {table.id} to {worker}")
        raise AssertionError("unreachable")

    def _upload_to(
        self, worker: str, table: ShippedTable, session: SessionContext, scan: ExecutionPlan
    ) -> TaskResult:
        run = self.run
        started = time.perf_counter()
        client = run.services.clients.get(worker)
        partitions, schema = [], None
        for partition in range(scan.partition_count):
            batches = stream_partition(session, scan, partition, run.cancel_scope.check)
            try:
                message = ShipPartition(run.query_id, table.id, partition, run.compression)
                result, batch_schema = client.put_partition(message, batches)
            finally:
                batches.close()
            partitions.append(result)
            if result.path is not None and schema is None and batch_schema is not None:
                schema = batch_schema.serialize().to_pybytes()
        return TaskResult(tuple(partitions), schema, time.perf_counter() - started, 0)

    def _any_worker(self, table: ShippedTable, attempt: int) -> str:
        """A live worker to hold a table's files: released with the query, probed while it runs."""
        run = self.run
        live = run.live_workers()
        if not live:
            raise run.no_worker_left()
        worker = live[(table.id + attempt) % len(live)]
        run.contacted.add(worker)
        run.liveness.watch(run.query_id, worker)
        return worker
