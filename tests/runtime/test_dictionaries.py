"""Exchange files hold dictionary columns whose batches came with different dictionaries."""

from __future__ import annotations

import pyarrow as pa
import pytest

from datafusion_distributed.runtime.dictionaries import DictionaryUnifier


def _dict(values: list[str | None], dictionary: list[str]) -> pa.DictionaryArray:
    indices = pa.array([None if v is None else dictionary.index(v) for v in values], pa.uint16())
    return pa.DictionaryArray.from_arrays(indices, pa.array(dictionary))


def test_batches_with_their_own_dictionaries_write_to_one_file_and_read_back(tmp_path):
    schema = pa.schema([("part", pa.dictionary(pa.uint16(), pa.string())), ("v", pa.int64())])
    batches = [
        pa.record_batch([_dict(["0", "0"], ["0"]), pa.array([1, 2])], schema=schema),
        pa.record_batch([_dict(["5", None, "0"], ["5", "0"]), pa.array([3, 4, 5])], schema=schema),
        pa.record_batch([_dict(["9"], ["x", "9"]), pa.array([6])], schema=schema),
    ]
    path = tmp_path / "out.arrow"
    unifier = DictionaryUnifier()
    options = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=True)
    with pa.ipc.new_file(path, schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(unifier.unify(batch))
    table = pa.ipc.open_file(path).read_all()
    assert table.schema == schema
    assert table.column("part").to_pylist() == ["0", "0", "5", None, "0", "9"]
    assert table.column("v").to_pylist() == [1, 2, 3, 4, 5, 6]


def _write_and_read(path, schema: pa.Schema, batches: list[pa.RecordBatch]) -> pa.Table:
    unifier = DictionaryUnifier()
    options = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=True)
    with pa.ipc.new_file(path, schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(unifier.unify(batch))
    return pa.ipc.open_file(path).read_all()


def test_a_first_batch_of_nulls_with_an_empty_dictionary_is_followed_by_values(tmp_path):
    """Arrow's file writer takes no delta on an empty dictionary: a first batch of nulls
    (an all-null column read with small batches) failed with "Dictionary replacement"."""
    schema = pa.schema([("part", pa.dictionary(pa.uint16(), pa.string()))])
    batches = [
        pa.record_batch([_dict([None, None], [])], schema=schema),
        pa.record_batch([_dict(["a", None, "b"], ["a", "b"])], schema=schema),
        pa.record_batch([_dict([None], [])], schema=schema),
    ]
    table = _write_and_read(tmp_path / "out.arrow", schema, batches)
    assert table.column("part").to_pylist() == [None, None, "a", None, "b", None]


def test_dictionaries_nested_in_lists_and_structs_are_unified(tmp_path):
    """The partial state of `array_agg(dk ORDER BY dk)` over a dictionary column is a list of
    dictionaries; structs and maps hold them too."""
    dk = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema(
        [
            ("l", pa.list_(dk)),
            ("s", pa.struct([("d", dk), ("n", pa.int64())])),
            ("ls", pa.large_list(pa.struct([("d", dk)]))),
        ]
    )

    def batch(first: list[str], second: list[str]) -> pa.RecordBatch:
        lists = pa.ListArray.from_arrays([0, 1, len(first)], pa.array(first).dictionary_encode())
        lists = pa.ListArray.from_arrays(lists.offsets, lists.values, mask=pa.array([False, True]))
        struct = pa.StructArray.from_arrays(
            [pa.array(second).dictionary_encode(), pa.array([1, 2])], fields=list(schema.field("s").type)
        )
        inner = pa.StructArray.from_arrays([pa.array(first).dictionary_encode()], fields=[pa.field("d", dk)])
        large = pa.LargeListArray.from_arrays([0, len(first), len(first)], inner)
        return pa.record_batch([lists, struct, large], schema=schema)

    batches = [batch(["x", "y"], ["p", "q"]), batch(["z", "x", "w"], ["q", "r"])]
    table = _write_and_read(tmp_path / "out.arrow", schema, batches)
    assert table.column("l").to_pylist() == [["x"], None, ["z"], None]
    assert [row["d"] for row in table.column("s").to_pylist()] == ["p", "q", "q", "r"]
    assert table.column("ls").to_pylist() == [[{"d": "x"}, {"d": "y"}], [], [{"d": d} for d in "zxw"], []]


def test_without_unifying_the_file_format_refuses_a_new_dictionary(tmp_path):
    """Why the unifier exists: this is the error tasks failed with."""
    schema = pa.schema([("part", pa.dictionary(pa.uint16(), pa.string()))])
    with pa.ipc.new_file(tmp_path / "out.arrow", schema) as writer:
        writer.write_batch(pa.record_batch([_dict(["0"], ["0"])], schema=schema))
        with pytest.raises(pa.ArrowInvalid, match="Dictionary replacement"):
            writer.write_batch(pa.record_batch([_dict(["5"], ["5"])], schema=schema))


def test_too_many_values_for_the_index_type_is_a_clear_error():
    schema = pa.schema([("c", pa.dictionary(pa.int8(), pa.string()))])
    unifier = DictionaryUnifier()
    for start in (0, 100):
        values = [str(i) for i in range(start, start + 100)]
        indices = pa.array(range(100), pa.int8())
        batch = pa.record_batch([pa.DictionaryArray.from_arrays(indices, pa.array(values))], schema=schema)
        if start == 0:
            unifier.unify(batch)
        else:
            with pytest.raises(ValueError, match="more than its index type can address"):
                unifier.unify(batch)
