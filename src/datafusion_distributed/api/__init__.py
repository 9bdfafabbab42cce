"""The user's API: what `import datafusion_distributed` offers, beside the errors and clusters.

- `context`: DistributedContext, wrapping the user's SessionContext: tables, UDFs and settings
  are DataFusion's own; `sql()` and the readers make DistributedDataFrames; the `distributed.*`
  settings namespace (`settings`, read from SQL by `settings_statements`) changes `config`.
- `engine`: what a context's frames plan and run their queries with: the workers, the config
  (one snapshot per query, for its plan and its run) and the services every run shares.
- `dataframe`: DistributedDataFrame, DataFusion's DataFrame whose results and file writes run
  on the workers (`write_statements` turns its writes into COPY and INSERT statements);
  `display` draws its first rows as text or HTML.
- `config`: DistributedConfig, the one public config.
"""
