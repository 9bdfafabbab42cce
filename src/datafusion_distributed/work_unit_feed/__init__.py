"""Work-unit feeds: units of work discovered while a query runs, handed to tasks as they ask.

A feed is a provider of units (on the coordinator) and a reader turning one unit into Arrow
record batches (on the workers), or, for a feed of Parquet files, DataFusion's own Parquet
reader. Its table is registered as an Arrow scan over empty files whose folder's name
identifies it (`codec.feed_scan`); the planner makes every such scan a feed scan of its
stage, and the tasks reading it ask the coordinator's feed service for units. A stage that
reads a feed of Parquet files, and whose plan keeps each row's results apart, runs in rounds
(`distributed_planner.rounds`, `reading.FeedRounds`).

Invariants:
- every unit is read exactly once per scan in a successful query: units of a failed or
  abandoned task attempt go back to the queue, the units of a task that succeeded are its own
  (a rerun after its worker is lost reads the same ones) (`dispatch`);
- the provider runs only while a query runs, pulled as tasks need units, and stops when the
  query ends, fails or is cancelled;
- a task holds at most `partitions` units at once (`reading`), or two rounds' when it runs in
  rounds; the only task of a stage, or one reading a feed whole, takes a Parquet feed's files
  (paths only) when it starts;
- a plan that reads a feed never runs from DataFusion's in-memory plan, which would read the
  empty file: it runs from bytes, with the feed, or fails saying why.
"""

from .errors import FeedError
from .feed import WorkUnitFeed, read_units

__all__ = ["FeedError", "WorkUnitFeed", "read_units"]
