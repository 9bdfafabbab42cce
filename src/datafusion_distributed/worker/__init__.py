"""The worker: its Flight service (`flight_worker`), the tasks it runs (`task_runner`), the spool that holds task outputs (`spool`),
the queries it was told to cancel (`cancellation`), the count of what it served (`served`) and
its drain (`drain`: no new task once asked to leave, the running ones and held outputs waited for).
Task execution itself is shared with the coordinator's head stage, in `runtime/`.

The spool, one folder per worker, laid out by query:

    <spool>/<query_id>/stage-<s>/task-<t>/attempt-<a>/part-<p>.arrow
                                                                  outputs of a task attempt
                                                                  (and, as attempt 0 of task 0
                                                                  of its id, a memory table a
                                                                  coordinator shipped)
    <spool>/<query_id>/inputs/stage-<s>-task-<t>-attempt-<a>/     inputs one attempt fetched
    <spool>/.released/                                            queries being deleted

Paths are built from validated integers and query ids only. An output is written to
`part-<p>.arrow.tmp` and renamed when complete, so a reader never sees half a file. Two attempts
of one task (a speculative copy, a recompute on a worker that ran a stopped attempt) never share
a file; a ticket names no attempt, and is served the attempt that last finished on the worker.
An attempt stopped alone (`cancel_attempt`: another attempt won) has its folder deleted. Lifetime:
fetched inputs go when the task attempt that read them ends; outputs stay until the coordinator
releases (or cancels) the query, which moves its folder into `.released/` at once and deletes it
in the background; folders a dead coordinator left behind are swept once their lease (renewed by
the coordinator's heartbeats and by the query's task activity) is older than the TTL, and those
an earlier worker on the same folder left are deleted when a worker starts on it.
With a quota, every byte is charged to its query before it is written.
"""
