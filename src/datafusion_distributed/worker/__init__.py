"""The worker: its Flight service, task execution and the spool that holds task outputs."""
