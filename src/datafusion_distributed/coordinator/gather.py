"""Read a final stage's task outputs back as the query's result batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from ..runtime.outputs import TaskOutput


def restore_names(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Give a batch read from an exchange file the plan's column names back."""
    if batch.schema.names == schema.names:
        return batch
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def read_file(path: str) -> Iterator[pa.RecordBatch]:
    """The batches of one exchange file on this machine."""
    with pa.OSFile(path) as source:  # copies: the files are deleted after reading
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def read_outputs(outputs: Iterable[TaskOutput]) -> Iterator[pa.RecordBatch]:
    """The batches of every partition file of `outputs`, in order, with the plan's column names;
    outputs that produced no rows are skipped."""
    for output in outputs:
        if output.schema is None:
            continue
        schema = pa.ipc.read_schema(pa.py_buffer(output.schema))
        for part in output.partitions:
            if part.path is not None:
                for batch in read_file(part.path):
                    yield restore_names(batch, schema)
