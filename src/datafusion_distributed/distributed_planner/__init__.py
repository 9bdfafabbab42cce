"""Turns a DataFusion physical plan into a DAG of stages, each run as one or more tasks.

The invariant every step keeps: **every intermediate plan stays executable on one node.**
Cutting never changes the plan's shape: a boundary node stays in the plan (a coalesce or merge
runs in both producer and consumer, a shuffle's repartition in the producer), so each stage is
an ordinary DataFusion plan and one task over all of its inputs computes exactly what
single-node DataFusion computes. Splitting a stage across tasks only restricts which files and
partitions each task reads (`boundaries` says where that is safe; anything doubtful gives the
stage one task).

A plan is sent to workers only when it travels faithfully through DataFusion's serialisation
(`fidelity`); otherwise it runs on one node, from memory, with the reason in its display.
Modules: `planner` (the passes, in order, each in a module named by what it does:
`series_repair`, `cut_boundaries`, `task_counts`, `fold_boundaries`, `build_stages`, then
`fidelity`, over the `fragments` they fill in), `boundaries` (where to cut and what forbids
splitting), `config` (the settings that shape a plan).
"""
