"""Whether a physical plan travels faithfully through DataFusion's own plan serialisation.

A distributed plan reaches its workers as bytes, and DataFusion 55's protobuf round trip is
lossy for a few constructs: the decoded plan computes something else, with no error. Two checks
keep such plans on one node, where they run from the in-memory plan:

- constructs known to be lost when encoded (they leave no trace in the decoded plan's text, so
  only a list finds them); the list comes from running DataFusion's own SQL test files both from
  the in-memory plan and from the plan decoded from its bytes (`python -m devtools.slt --mode
  roundtrip` in the repository), and is to be regenerated on every DataFusion upgrade;
- every other difference the round trip makes to the plan's text (a grouping set dropped, an
  expression rewritten), found by decoding the plan and comparing.
"""

from __future__ import annotations

import os
import re

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import file_groups, scan_kind
from ..common.errors import first_line
from ..execution_plans.plan_node import PlanNode
from .repeated_casts import without_repeated_casts

_WINDOW = r"(?:BoundedWindowAggExec|WindowAggExec):"

# (pattern in a node's display line, what DataFusion 55's serialisation loses there). Found by
# the round-trip run over DataFusion's SQL test files and by reading datafusion-proto 55.
LOST_WHEN_ENCODED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(_WINDOW + r".*IGNORE NULLS"), "IGNORE NULLS of a window function is dropped"),
    (re.compile(_WINDOW + r".*FILTER \(WHERE"), "the FILTER clause of a window aggregate is dropped"),
    (
        re.compile(r"\.(?:gz|bz2|xz|zst)\b.*file_type=csv"),
        "the compression of a CSV scan is dropped",
    ),
)


# A window function DataFusion reversed to use its input's order is decoded unreversed, and
# these three then read another row (their offset or n negated). A reversed function keeps its
# name, frame included, while its own frame is reversed: a frame that differs from its name's
# tells a reversal; a frame that reads the same reversed cannot tell, so it is refused too.
_SHIFTING = re.compile(r"\b(?:lag|lead|nth_value)\(")
_BOUND = r"(?:UNBOUNDED PRECEDING|UNBOUNDED FOLLOWING|CURRENT ROW|\S+ PRECEDING|\S+ FOLLOWING)"
_FRAME = rf"(?:ROWS|RANGE|GROUPS) BETWEEN (?P<start>{_BOUND}) AND (?P<end>{_BOUND})"
_NAMED_FRAME = re.compile(rf"{_FRAME}: (?:Ok\()?Field \{{")
_SHOWN_FRAME = re.compile(rf", frame: {_FRAME}")
REVERSED = "the reversal of lag, lead or nth_value (DataFusion's, to use its input's order) is dropped"
UNTELLABLE = (
    "lag, lead or nth_value over a frame that reads the same reversed (or is not shown as one): "
    "whether DataFusion reversed it, which serialisation drops, cannot be told"
)


def _reversed_bound(bound: str) -> str:
    if bound.endswith(" PRECEDING"):
        return bound.removesuffix(" PRECEDING") + " FOLLOWING"
    if bound.endswith(" FOLLOWING"):
        return bound.removesuffix(" FOLLOWING") + " PRECEDING"
    return bound


def shifting_window_lost(line: str) -> str | None:
    """Why the window node of display `line` computes another lag, lead or nth_value once
    serialised (DataFusion reversed it), or cannot be shown not to; None if each of them runs
    as written (a lag of a window sorted for it: a PARTITION BY ... ORDER BY window)."""
    if not re.match(_WINDOW, line.lstrip()):
        return None
    pos = 0
    while (found := _SHIFTING.search(line, pos)) is not None:
        named = _NAMED_FRAME.search(line, found.end())
        shown = _SHOWN_FRAME.search(line, named.end()) if named else None
        if named is None or shown is None:
            return UNTELLABLE
        if (named["start"], named["end"]) != (shown["start"], shown["end"]):
            return REVERSED
        if _reversed_bound(named["end"]) == named["start"]:
            return UNTELLABLE
        pos = shown.end()
    return None


# (pattern in a node's display line, why DataFusion's plan for other settings than the user's
# may compute something else): distributed plans are made with the cluster's partition count.
REPLANNING_HAZARDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"DataSourceExec:.*output_partitioning=Hash\("),
        "a scan declares hash partitioning from its files' partition values "
        "(datafusion.optimizer.preserve_file_partitions), which DataFusion 55 joins wrongly with "
        "another side repartitioned for a different partition count",
    ),
)


def lost_type(logical_plan_text: str) -> str | None:
    """Why a query whose logical plan (with its schemas) reads `logical_plan_text` would change
    types when serialised: a Float16 value is encoded as a Float32."""
    if "Float16" in logical_plan_text:
        return "a Float16 value becomes Float32 when the plan is serialised"
    return None


# Nodes of libraries whose tables the library reads its own way, and what to do instead.
KNOWN_FOREIGN_NODES = {
    "DeltaScanExec": (
        "a Delta table read by deltalake's own table provider (DeltaScanExec) runs on one node: "
        "register it with DistributedContext.register_delta to split its scan across tasks (which "
        "reads it so too while its files have deletion vectors, which only deltalake applies; see "
        "docs/lakehouse.md)"
    ),
}


def unserialisable(plan: ExecutionPlan, codecs: SessionContext | None = None) -> str:
    """Why DataFusion cannot serialise `plan` (with the extension codecs of `codecs`): its
    deepest node that has no serialised form, or the topmost of a compiled library (whose
    children are its own)."""
    line = plan.display().split("\n", 1)[0]
    node = line.split(":", 1)[0].strip()
    if node != "FFI_ExecutionPlan":
        for child in plan.children():
            try:
                child.to_bytes() if codecs is None else child.to_bytes(codecs)
            except Exception:  # DataFusion raises plain Exception
                return unserialisable(child, codecs)
    else:  # a compiled library's node: its codec is not installed
        name = line.split(":", 1)[1].split(",", 1)[0].strip()
        if name in KNOWN_FOREIGN_NODES:
            return KNOWN_FOREIGN_NODES[name]
        return (
            f"{name}, a node of a compiled library, has no serialised form without its codec: give "
            "DistributedContext the library's FFI physical extension codec (extensions=[...], see "
            "docs/extensions.md)"
        )
    if node == "DataSinkExec" and "sink=MemoryTable" in line:
        return (
            "DataSinkExec inserts into a memory table, which lives in the coordinator and has no "
            "serialised form in DataFusion: the INSERT runs there"
        )
    return f"{node} has no serialised form in DataFusion"


_COMPRESSED = (".gz", ".bz2", ".xz", ".zst")


def json_format_lost(node: PlanNode) -> str | None:
    """Why a JSON scan would read its files otherwise once decoded, or None. Its array format
    (`newline_delimited = false`) and compression are dropped and leave no trace in the plan,
    so the files say: a compressed name, or a local file whose text starts with `[`; a file
    this machine cannot read is assumed the worst."""
    if scan_kind(node.raw) != "json":
        return None
    for group in file_groups(node.raw):
        for scanned in group:
            if scanned.path.endswith(_COMPRESSED):
                return "the compression of a JSON scan is dropped"
            local = scanned.local_path
            if not os.path.isfile(local):
                return "the format of a JSON file outside this machine cannot be checked"
            with open(local, "rb") as f:
                if f.read(4096).lstrip().startswith(b"["):
                    return "the array format of a JSON scan (newline_delimited = false) is dropped"
    return None


def lost_construct(root: PlanNode) -> str | None:
    """Why `root` would lose a construct known to be dropped by serialisation, or would compute
    something else planned for the cluster; None if neither."""
    for node in root.walk():
        why_json = json_format_lost(node)
        if why_json is not None:
            return f"{node.name}: {why_json} when the plan is serialised"
        for pattern, why in LOST_WHEN_ENCODED:
            if pattern.search(node.line):
                return f"{node.name}: {why} when the plan is serialised"
        why_window = shifting_window_lost(node.line)
        if why_window is not None:
            return f"{node.name}: {why_window} when the plan is serialised"
        for pattern, why in REPLANNING_HAZARDS:
            if pattern.search(node.line):
                return f"{node.name}: {why}"
    return None


# Attributes DataFusion 55 drops on the way that only guide optimisations (the order in which
# a Parquet scan reads row groups to help a sort above it): not a difference of answers.
PERFORMANCE_ONLY = re.compile(r", (?:sort_order_for_reorder|reverse_row_groups)=(?:\[[^\]]*\]|\w+)")


def _comparable(display: str) -> list[str]:
    return [PERFORMANCE_ONLY.sub("", line) for line in display.splitlines()]


# How DataFusion says a plan names a function the decoding session cannot rebuild: a compiled
# (FFI) function registered on the user's context, which travels by name only.
_NEEDS_CODEC = re.compile(r"PhysicalExtensionCodec is not provided for (?P<what>.+)$")
# How the wheel says a node was written by a codec the decoding session does not have.
_CODEC_MISSING = re.compile(r"encoded by extension codec '(?P<id>[^']+)', which is not installed")


def round_trip_difference(
    plan: ExecutionPlan, raw: bytes, session: SessionContext, worker_session: SessionContext | None = None
) -> str | None:
    """How the plan decoded from `raw` (the bytes of `plan`) differs from `plan`, or None.
    Decoded in `worker_session`, a session built as the workers' are, when given: a function
    only the user's `session` knows is found there; a plan that fails there for another cause
    (an object store only `session` has, which the planner checks itself) is decoded in
    `session`."""
    try:
        decoded = ExecutionPlan.from_bytes(worker_session or session, raw)
    except Exception as exc:  # DataFusion raises plain Exception
        message = first_line(str(exc))
        needs_codec = _NEEDS_CODEC.search(message)
        if needs_codec is not None:
            return (
                f"{needs_codec['what']} is registered on this context only (a compiled function or "
                "node, which travels by name or through a codec): workers cannot rebuild it. Install "
                "it where tasks run: give DistributedContext an installer or codec that registers it "
                "(extensions=['module:function']) and start workers with --extension module:function "
                "(see docs/extensions.md)"
            )
        codec_missing = _CODEC_MISSING.search(message)
        if codec_missing is not None:
            return (
                f"the plan holds a node of the extension codec {codec_missing['id']!r}, installed on "
                "this context only: workers cannot decode it. Give DistributedContext that codec "
                "(extensions=[...]) and start workers with --extension (see docs/extensions.md)"
            )
        if worker_session is not None:
            return round_trip_difference(plan, raw, session)
        return f"DataFusion cannot rebuild the plan from its own bytes: {message}"
    before = _comparable(plan.display_indent())
    after = without_repeated_casts(_comparable(decoded.display_indent()))
    for old, new in zip(before, after, strict=False):
        if old != new:
            return f"the plan changes when rebuilt from its bytes: {old.strip()!r} becomes {new.strip()!r}"
    if len(before) != len(after):
        return "the plan changes shape when rebuilt from its bytes"
    return None


def travel_blocker(
    plan: ExecutionPlan,
    root: PlanNode,
    session: SessionContext,
    logical_plan_text: str = "",
    worker_session: SessionContext | None = None,
) -> str | None:
    """Why `plan` (snapshot `root`, planned in `session`; its logical plan with schemas reads
    `logical_plan_text`) must not be distributed, or None if it travels faithfully to workers
    that decode it in sessions like `worker_session` (default `session`)."""
    return (
        lost_type(logical_plan_text)
        or lost_construct(root)
        or round_trip_difference(plan, root.raw, session, worker_session)
    )


def why_kept_on_one_node(
    plan: ExecutionPlan, session: SessionContext, logical_plan_text: str = ""
) -> str | None:
    """Why `plan` would run on one node however large its data (it cannot be serialised, or
    would not travel faithfully), or None: what the round-trip check asks of every difference."""
    try:
        root = PlanNode.from_plan(plan)
    except Exception:  # DataFusion raises plain Exception
        return unserialisable(plan)
    return travel_blocker(plan, root, session, logical_plan_text)
