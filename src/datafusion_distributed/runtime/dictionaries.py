"""Give every batch of an exchange file one growing dictionary per dictionary column.

Arrow IPC files allow one dictionary per field, extended by deltas, never replaced; DataFusion
hands out dictionary columns (a table's partition columns, for instance) with a new dictionary
per file or batch. Before a batch is written, each top-level dictionary column is re-encoded
against the values the file has seen so far: its dictionary only grows, and the writer (with
`emit_dictionary_deltas`) sends what is new as a delta.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


class DictionaryUnifier:
    """Re-encodes the dictionary columns of successive batches against growing dictionaries."""

    def __init__(self) -> None:
        self._seen: dict[int, pa.Array] = {}  # column index -> the file's dictionary so far

    def unify(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """`batch` with each top-level dictionary column re-encoded (others untouched)."""
        if not any(pa.types.is_dictionary(field.type) for field in batch.schema):
            return batch
        columns = [
            self._column(i, column) if pa.types.is_dictionary(column.type) else column
            for i, column in enumerate(batch.columns)
        ]
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema)

    def _column(self, index: int, column: pa.DictionaryArray) -> pa.DictionaryArray:
        seen = self._seen.get(index)
        values = column.dictionary
        if seen is None:
            seen = values.slice(0, 0)
        new = values.filter(pc.invert(pc.is_in(values, value_set=seen)))
        if len(new):
            new = pc.unique(new)  # a dictionary may repeat a value
            seen = pa.concat_arrays([seen, new])
            self._seen[index] = seen
        if len(seen) > _index_capacity(column.type.index_type):
            raise ValueError(
                f"a dictionary column of type {column.type} has {len(seen)} distinct values in one "
                "exchange file, more than its index type can address"
            )
        positions = pc.index_in(values, value_set=seen).cast(column.type.index_type)
        indices = pc.take(positions, column.indices)
        return pa.DictionaryArray.from_arrays(indices, seen, ordered=column.type.ordered)


def _index_capacity(index_type: pa.DataType) -> int:
    return 2 ** (index_type.bit_width - (1 if pa.types.is_signed_integer(index_type) else 0))
