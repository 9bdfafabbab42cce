"""The coordinator: the public entry point and the run of a query's stage DAG.

- `context`: DistributedContext, wrapping the user's SessionContext; it plans queries (in a
  copy of the user's session) and makes DistributedDataFrames (`dataframe`).
- `scheduler`: QueryRun, one execution of a distributed plan: stages start when their inputs
  are complete, tasks are placed on workers, lost outputs are recomputed (`retry` decides what
  is tried again, and reports every lost worker once; `liveness` probes the workers in use, so
  one that stops answering is lost after `liveness_timeout`, and renews the queries' leases).
- `head`: the end of a query in this process: the final stage run here or gathered
  (`gather`), streamed to the caller; a worker lost while it is read is recovered as long as
  nothing read was handed out (ResultStreamLost otherwise).
- `lifecycle`: the run's events to the user's handlers and into its metrics;
  `cancellation` (cancel and timeouts), `config`, `errors`, `inputs` (which producer files each
  consumer partition reads).
"""
