"""The run of one query, from a distributed plan to the result streamed to the caller.

- `scheduler`: QueryRun, one execution of a distributed plan: stages start when their inputs
  are complete, tasks are placed on workers, lost outputs are recomputed (`retry` decides what
  is tried again, and reports every lost worker once; `liveness` probes the workers in use, so
  one that stops answering is lost after `liveness_timeout`, and renews the queries' leases).
- `services`: the long-lived services every run of a context shares (`RunServices`); the
  run's settings are those of the config its query was planned with (`QueryPlanConfig`).
- `run_state`: the state the scheduler, the head stage and the table shipper share.
- `adapting` (stages re-planned as they start), `feed_tasks` (the feed units of task
  attempts), `release` (the query's data deleted on its workers at its end): the parts of a
  run QueryRun hands its jobs to.
- `head`: the end of a query in this process: the final stage run here or gathered
  (`gather`), streamed to the caller; a worker lost while it is read is recovered as long as
  nothing read was handed out (ResultStreamLost otherwise).
- `shipping`: large memory tables written once as Arrow files before the first stage.
- `writes`, `object_store_writes`: a write split over tasks, staged per attempt and committed
  when the query succeeded (into a local folder, or into an S3 bucket).
- `lifecycle`: the run's events to the user's handlers and into its metrics;
  `cancellation` (cancel and timeouts), `inputs` (which producer files each consumer
  partition reads).
"""
