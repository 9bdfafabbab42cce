"""Plan-bytes editing without a protobuf schema: splicing subtrees, splitting scans, building input leaves.

DataFusion's own `to_bytes()` is the only serialiser of a plan here: stages and tasks are made
by editing its bytes, never by decoding a plan and encoding it again. The rules that keep an
edit faithful:

- **Only payloads and their lengths change.** A child's bytes appear verbatim inside its
  parent's, as the payload of a length-delimited field (`wire`); an edit swaps such a payload
  and rewrites the length prefix of every field enclosing it, from the root down (`splice`).
  Every other byte of the plan is left as DataFusion wrote it.
- **Identical subtrees are told apart by occurrence**, counted in byte order, which is the order
  of a depth-first walk of the children (a self-join holds the same scan twice).
- **No field number is guessed.** The few read or written are in `fields`, checked against
  DataFusion's schema at the version the wheel embeds and pinned by a test; where a node keeps
  its children is learned from DataFusion itself (`children`), not copied from its schema.
- **What cannot be read raises** (`WireError`, `SpliceError`); callers then assume the worst
  (no split, or the plan kept on one node), never a guess.
"""

from .scan import (
    ScannedFile,
    file_groups,
    restrict_file_groups,
    scan_kind,
    with_file_groups,
    with_output_names,
    without_files,
)
from .splice import SpliceError, replace_subtree, subtree_offsets
from .wire import WireError

__all__ = [
    "ScannedFile",
    "SpliceError",
    "WireError",
    "file_groups",
    "replace_subtree",
    "restrict_file_groups",
    "scan_kind",
    "subtree_offsets",
    "with_file_groups",
    "with_output_names",
    "without_files",
]
