"""Pass 4 of planning: fold back the boundaries not worth an exchange."""

from __future__ import annotations

from .config import QueryPlanConfig
from .fragments import Fragment, cut_edges, stage_leaves
from .scan_size import scanned_bytes


def fold_boundaries(fragment: Fragment, config: QueryPlanConfig) -> None:
    """Fold back boundaries not worth an exchange.

    - 1 -> 1: producer and consumer both run as one task.
    - small broadcasts into a split consumer: a join's collected side that reads only small
      scans (no other stage) is computed whole by every consumer task, which costs less than a
      stage and an exchange. A single-task consumer keeps the stage: its producer runs in
      parallel there.
    """
    for edge in fragment.edges:
        if edge.fragment.table is not None:
            continue  # folding it back would put the table in the plan again
        fold_boundaries(edge.fragment, config)
        if edge.fragment.tasks == 1 and fragment.tasks == 1:
            edge.inline = True
            if not fragment.reads_leaves and edge.fragment.reads_leaves:
                # one stage now: its one task is the folded producer's, for the producer's reason
                fragment.reason, fragment.reads_leaves = edge.fragment.reason, True
        elif (
            edge.whole
            and fragment.tasks > 1
            and all(e.fragment.table for e in cut_edges(edge.fragment))
            and not stage_leaves(edge.fragment, "feeds")  # each consumer task would read every unit
        ):
            scanned = sum(scanned_bytes(scan) for scan, _ in stage_leaves(edge.fragment, "scans"))
            edge.inline = scanned <= config.broadcast_inline_bytes
