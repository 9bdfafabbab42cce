"""What a worker has served to others: the bytes of task outputs that left it over Flight.

Workers of one host read each other's spools in place and serve nothing; workers that share
nothing serve every exchange another worker (or the coordinator) reads. The counts are the
worker's own side of that traffic, reported by its `health` action, so the bytes a query's
metrics say were fetched can be checked against the bytes that really crossed the network."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import pyarrow as pa


class ServedBytes:
    """Thread-safe running totals of what this worker sent: `file_bytes` of output files copied
    out as they are stored (`read_output`: compressed when the spool is), and `stream_bytes` of
    Arrow data streamed by `do_get` (batches decoded, uncompressed)."""

    def __init__(self) -> None:
        self.file_bytes = 0
        self.stream_bytes = 0
        self._lock = threading.Lock()

    def file_chunk(self, size: int) -> None:
        """Count `size` bytes of an output file sent by `read_output`."""
        with self._lock:
            self.file_bytes += size

    def streamed(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """`batches`, counting each one's Arrow bytes as it is sent by `do_get`."""
        for batch in batches:
            with self._lock:
                self.stream_bytes += batch.nbytes
            yield batch
