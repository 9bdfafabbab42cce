"""The runtime of one task: splice its inputs into its plan, execute every output partition,
write or stream them (`run.run_task`).

Used by workers for every task, by the coordinator for a single-task final stage and by the
local runner, so a query runs the same code whether its stages run in one process or across
many. It knows nothing of the network: inputs arrive as local files.
"""
