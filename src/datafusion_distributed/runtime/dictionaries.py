"""Give every batch of an exchange file one growing dictionary per dictionary field.

Arrow IPC files allow one dictionary per field, extended by deltas, never replaced; DataFusion
hands out dictionary columns (a table's partition columns, for instance) with a new dictionary
per file or batch, also nested inside lists and structs (the partial state of
`array_agg(dk ORDER BY dk)` over a dictionary column). Before a batch is written, each
dictionary, at any depth, is re-encoded against the values the file has seen so far at its
place: its dictionary only grows, and the writer (with `emit_dictionary_deltas`) sends what is
new as a delta. A first dictionary that is empty (a column of nulls) is given one null value:
Arrow's writer takes no delta on an empty dictionary, and no index points at that value.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

_Path = tuple[int, ...]


@functools.lru_cache(maxsize=1024)  # asked of every column of every batch written
def has_dictionary(data_type: pa.DataType) -> bool:
    """Whether `data_type` is, or holds at any depth, a dictionary."""
    if pa.types.is_dictionary(data_type):
        return True
    return any(has_dictionary(data_type.field(i).type) for i in range(data_type.num_fields))


class DictionaryUnifier:
    """Re-encodes the dictionaries of successive batches against growing dictionaries."""

    def __init__(self) -> None:
        self._seen: dict[_Path, pa.Array] = {}  # a dictionary's place -> the file's dictionary so far

    def unify(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """`batch` with every dictionary re-encoded (columns without one untouched)."""
        if not any(has_dictionary(field.type) for field in batch.schema):
            return batch
        columns = [
            self._array((i,), column) if has_dictionary(column.type) else column
            for i, column in enumerate(batch.columns)
        ]
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema)

    def _array(self, path: _Path, array: pa.Array) -> pa.Array:
        kind = array.type
        if pa.types.is_dictionary(kind):
            return self._dictionary(path, array)
        if not has_dictionary(kind):
            return array
        mask = array.is_null() if array.null_count else None
        if pa.types.is_struct(kind):
            children = [self._array((*path, i), array.field(i)) for i in range(kind.num_fields)]
            return pa.StructArray.from_arrays(children, fields=list(kind), mask=mask)
        if pa.types.is_map(kind):
            keys = self._array((*path, 0), array.keys)
            items = self._array((*path, 1), array.items)
            return pa.MapArray.from_arrays(array.offsets, keys, items, type=kind, mask=mask)
        if pa.types.is_fixed_size_list(kind):
            values = self._array((*path, 0), array.flatten())
            return pa.FixedSizeListArray.from_arrays(values, type=kind, mask=mask)
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            values = self._array((*path, 0), array.values)
            return type(array).from_arrays(array.offsets, values, type=kind, mask=mask)
        raise ValueError(
            f"a dictionary nested in a column of type {kind} cannot be written to an exchange file"
        )

    def _dictionary(self, path: _Path, column: pa.DictionaryArray) -> pa.DictionaryArray:
        values = column.dictionary
        seen = self._seen.get(path)
        if seen is None:
            seen = values.slice(0, 0) if len(values) else pa.nulls(1, values.type)
            self._seen[path] = seen
        new = values.filter(pc.invert(pc.is_in(values, value_set=seen)))
        if len(new):
            new = pc.unique(new)  # a dictionary may repeat a value
            seen = pa.concat_arrays([seen, new])
            self._seen[path] = seen
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
