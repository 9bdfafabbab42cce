"""The distributed plan: stages of tasks joined by network boundaries.

A stage is a fragment of the physical plan whose inputs are other stages' outputs. Every stage
is run as one or more tasks; task k runs the stage's plan with its share of the scans and of the
split inputs. Plans are kept as DataFusion plan bytes, so nothing here needs a running cluster.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import ScannedFile, replace_subtree
from ..codec.sink import FileSink
from .object_stores import ObjectStores
from .plan_node import PlanNode


class BoundaryKind(str, enum.Enum):
    """How a consumer reads the outputs of a producer stage."""

    SHUFFLE = "shuffle"  # hash partitions; consumer task k owns a contiguous range of them
    COALESCE = "coalesce"  # every producer task's single partition, read as one partition
    MERGE = "merge"  # one sorted partition per producer task, merged by the consumer
    MEMORY = "memory"  # a memory table's partitions, written once by the coordinator (`ShippedTable`)


@dataclass(frozen=True)
class InputBoundary:
    """Where an input is read in a stage's plan, and how it is spliced in there.

    `marker` stands in the stage's plan bytes where the boundary was. A task replaces it with
    a scan of the producer's Arrow IPC outputs (for a coalesce or merge, the original boundary
    node over that scan, so its fetch and sort order still apply).
    """

    marker: bytes
    kind: BoundaryKind
    boundary: bytes  # the original boundary subtree (runs in place of an empty exchange)
    boundary_child: bytes  # for coalesce and merge: the child the input scan replaces

    @property
    def runs_boundary(self) -> bool:
        """Whether the boundary node runs in the consumer over the input scan (a coalesce or a
        merge); a shuffle's or a memory table's scan takes the boundary's place."""
        return self.kind in (BoundaryKind.COALESCE, BoundaryKind.MERGE)

    def read_from_files(self) -> InputBoundary:
        """This boundary as it travels for an input read from the producers' files: nothing of
        it for a shuffle or a memory table, whose scan takes its place; for a coalesce or a
        merge, the node alone, its child replaced by `marker`, for the input scan to replace.
        The subtree below is the producers' work, done already, and may hold a memory table's
        rows: sent with every task, it could pass the size a worker accepts."""
        if not self.runs_boundary:
            return InputBoundary(self.marker, self.kind, b"", b"")
        node = replace_subtree(self.boundary, self.boundary_child, self.marker)
        return InputBoundary(self.marker, self.kind, node, self.marker)


@dataclass(frozen=True)
class ShippedTable:
    """A memory table too large to travel inside every task's plan: the coordinator writes its
    partitions once as Arrow IPC files, which its consumer reads like an exchange's outputs.

    `id` is the producer id the consumer's input names (after every stage's id); `path` leads
    from the plan's root to the scan (child indices), to find it in the in-memory plan.
    """

    id: int
    scan: bytes = field(repr=False)  # the memory scan's plan bytes: its data
    path: tuple[int, ...]
    rows: int
    data_bytes: int
    partitions: int

    def describe(self) -> str:
        """How explain() names the table: its rows and size, and that it is shipped once."""
        return f"memory table, {self.rows} rows, {self.data_bytes / (1024 * 1024):.1f} MiB, shipped once"


@dataclass(frozen=True)
class FeedScan:
    """A scan of a work-unit feed in a stage's plan: `marker` stands where `scan` was, and a
    task puts back `scan` reading the files it wrote from the units it was handed.

    `scan_id` tells the query's feed scans apart (a feed read twice, in a self-join or under a
    union, has its units handed out once to each scan); `whole` when every task of the stage
    reads all of its units (a side a join must see whole), rather than a share."""

    marker: bytes
    scan: bytes = field(repr=False)
    feed_id: str
    scan_id: int
    whole: bool = False
    name: str = ""  # the feed's table, for display
    partitions: int = 1  # the partitions DataFusion planned the scan with
    columns: tuple[str, ...] | None = None  # the columns its projection reads (None: all)
    plain: bool = False  # its projection only picks `columns`, in order (see `is_plain_projection`)
    rounds: bool = False  # its tasks may run in rounds over its units (see `distributed_planner.rounds`)
    # a feed of Parquet files that DataFusion reads: in rounds, or taken whole when the task
    # starts (its only task, or every task reading every unit); otherwise read as a reader's units are
    native: bool = False
    # a feed of Parquet files under a filter: the filter's predicate, for the Parquet scan to
    # prune with (see `work_unit_feed.reading`), and how DataFusion shows it
    predicate: bytes | None = field(default=None, repr=False)
    predicate_shown: str = ""

    def task_partitions(self, task: int, tasks: int) -> int:
        """The partitions of the scan task `task` of `tasks` reads, as the planner shares out
        a file scan's (contiguous chunks; all of them when the scan is read whole): a task
        reads as many units at once, one file each, so every node above sees the
        partitions it was planned over."""
        if self.whole or tasks <= 1:
            return self.partitions
        n = self.partitions
        return max(1, n * (task + 1) // tasks - n * task // tasks)

    def describe(self) -> str:
        """How explain() names the feed scan and how its tasks read it."""
        share = "every task reads every unit" if self.whole else "units handed to the tasks as they ask"
        if self.rounds:
            share += ", run in rounds"
        return f"[work-unit feed {self.name}: {share}]"


@dataclass(frozen=True)
class StageInput:
    """An input of a stage: the output of stage `producer`, read at `where` in the stage's plan
    (or, with `table`, the memory table the coordinator ships as producer `producer`)."""

    where: InputBoundary
    producer: int
    partitions: int  # partitions the consumer sees when it reads the input whole
    split: bool  # whether this stage's tasks each read a share of the partitions
    table: ShippedTable | None = None
    # the boundary subtree (`where.boundary`) as planned: what runs, reading nothing, in place of
    # an exchange its producers left empty (see `distributed_planner.empty_inputs`)
    boundary_node: PlanNode | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class TaskPlan:
    """What task `index` of a stage runs."""

    index: int
    plan: bytes  # the stage plan with this task's scans restricted; inputs still markers
    input_partitions: tuple[tuple[int, ...], ...]  # per input: the partitions this task reads
    scans: tuple[tuple[str, tuple[tuple[ScannedFile, ...], ...]], ...]  # per scan: kind, groups
    # per input, the producer tasks whose files it reads (None: all of them); empty when every
    # input is read from every producer. A share of a skewed partition reads some producers only.
    input_producers: tuple[tuple[int, ...] | None, ...] = ()

    def producers(self, input_index: int) -> tuple[int, ...] | None:
        """The producer tasks input `input_index` is read from (None: every producer)."""
        return self.input_producers[input_index] if self.input_producers else None


@dataclass(frozen=True)
class BroadcastJoin:
    """A partitioned hash join of a stage that may instead collect its left (build) side
    whole in every task, so that the stage's right (probe) side need not be shuffled: the
    producer of that side runs inside the stage, its tasks becoming the stage's.

    `build` and `probe` are the stage's inputs the join reads; `plan` is the stage's plan with
    the join in CollectLeft mode, its build input under a CoalescePartitionsExec, and the
    probe's marker still where the producer's work will go (below its repartition); `root`
    shows that plan (see `distributed_planner.broadcast`)."""

    build: int
    probe: int
    plan: bytes = field(repr=False)
    root: PlanNode = field(repr=False)


@dataclass(frozen=True)
class Stage:
    """A fragment of the plan run as `len(tasks)` tasks."""

    id: int
    root: PlanNode  # the original subtree, for display
    plan: bytes  # stage plan bytes with input markers and unrestricted scans
    inputs: tuple[StageInput, ...]
    tasks: tuple[TaskPlan, ...]
    output: BoundaryKind | None  # how the consumer reads this stage; None for the final stage
    reason: str = ""  # why the stage has the task count it has
    # the file write this stage's tasks each run over their share of the rows (the final
    # stage of a COPY or DataFrame write): each task writes to a staging folder of its own
    sink: FileSink | None = None
    feeds: tuple[FeedScan, ...] = ()  # the work-unit feeds the stage's tasks read
    # the inputs whose skewed partitions may be split across tasks by producer files, the
    # stage's other inputs then read whole by each share (see `distributed_planner.skew`)
    skew_inputs: tuple[int, ...] = ()
    broadcast: BroadcastJoin | None = None  # a join that may collect its build side instead

    @property
    def task_count(self) -> int:
        """How many tasks run the stage."""
        return len(self.tasks)


@dataclass(frozen=True)
class DistributedPlan:
    """Stages in dependency order (producers first); the last stage gives the query's result.

    When the final stage has one task it runs in the coordinator (the head) and streams its
    partitions; otherwise it runs on workers and the coordinator streams their outputs. A plan
    of one stage of one task runs from `physical`, DataFusion's in-memory plan, in `session`,
    the session it was planned in: it never goes through bytes. `settings` are the settings
    the plan was made and runs with that differ from their defaults (`name=value`), for display.
    `task_settings` are the user's DataFusion settings every task runs with, wherever it runs
    (`(name, value)` pairs; see `session_settings`). `object_stores` are the stores every task
    registers in its session (see `object_stores`; their credentials are never shown).
    `pruned` says, per table, how many of its files were skipped by their statistics.
    """

    stages: tuple[Stage, ...]
    physical: ExecutionPlan | None = field(default=None, compare=False, repr=False)
    session: SessionContext | None = field(default=None, compare=False, repr=False)
    single_node: str = ""  # why a plan that could be split runs on one node ("" when it does not)
    settings: tuple[str, ...] = ()
    task_settings: tuple[tuple[str, str], ...] = ()
    object_stores: ObjectStores = ()
    pruned: tuple[str, ...] = ()

    @property
    def final(self) -> Stage:
        """The stage whose output is the query's result (always the last)."""
        return self.stages[-1]

    def stage(self, stage_id: int) -> Stage:
        """The stage with id `stage_id` (KeyError if there is none)."""
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(f"no stage {stage_id}")

    @property
    def write(self) -> FileSink | None:
        """The file write the final stage's tasks split, when the plan runs distributed."""
        return self.final.sink if self.is_distributed else None

    @property
    def tables(self) -> tuple[ShippedTable, ...]:
        """The memory tables the coordinator ships before the stages run, by id."""
        found = {inp.table.id: inp.table for stage in self.stages for inp in stage.inputs if inp.table}
        return tuple(found[key] for key in sorted(found))

    @property
    def feeds(self) -> tuple[FeedScan, ...]:
        """Every feed scan of the plan, in stage order."""
        return tuple(feed for stage in self.stages for feed in stage.feeds)

    @property
    def in_memory(self) -> bool:
        """Whether the query runs in the coordinator from its in-memory plan."""
        return self.physical is not None and not self.is_distributed

    @property
    def is_distributed(self) -> bool:
        """Whether any work runs on workers: more than one stage, or a final stage of several tasks."""
        return len(self.stages) > 1 or self.final.task_count > 1
