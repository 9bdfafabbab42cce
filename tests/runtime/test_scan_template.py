"""The Arrow scan an exchange input becomes is made from a template planned per schema."""

from __future__ import annotations

import os
import tempfile

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec import with_file_groups
from datafusion_distributed.runtime import inputs

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.dictionary(pa.int32(), pa.string()))])


def test_making_a_template_writes_nothing_a_kill_could_leave(tmp_path, monkeypatch):
    """A worker killed at any point of it leaves no file: none is made."""
    seen: list[list[str]] = []

    class Spying(SessionContext):
        def register_arrow(self, *args, **kwargs):
            seen.append(os.listdir(tmp_path))  # what a kill now would leave
            return super().register_arrow(*args, **kwargs)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(inputs, "SessionContext", Spying)
    monkeypatch.setattr(inputs, "_templates", {})

    inputs._arrow_scan_template(pa.schema([("never_seen_before", pa.float32())]))

    assert seen == [[]] and os.listdir(tmp_path) == []


def test_a_template_reads_the_files_it_is_given(tmp_path):
    table = pa.table({"k": [1, 2, 3], "s": pa.array(["a", "b", "a"]).dictionary_encode()}, schema=SCHEMA)
    path = tmp_path / "part-0.arrow"
    with pa.ipc.new_file(path, SCHEMA) as writer:
        writer.write_table(table)

    scan = with_file_groups(inputs._arrow_scan_template(SCHEMA), [[inputs.local_file(str(path))], []])
    ctx = SessionContext()
    plan = ExecutionPlan.from_bytes(ctx, scan)

    assert plan.partition_count == 2
    batches = [b.to_pyarrow() for p in range(2) for b in ctx.execute(plan, p)]
    assert pa.Table.from_batches(batches, SCHEMA).equals(table)
