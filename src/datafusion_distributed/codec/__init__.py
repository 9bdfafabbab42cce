"""Plan-bytes editing without a protobuf schema: splicing subtrees, splitting scans, building input leaves."""

from .scan import (
    ScannedFile,
    file_groups,
    restrict_file_groups,
    scan_kind,
    with_file_groups,
    with_output_names,
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
]
