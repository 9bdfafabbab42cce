"""The distributed plan and what runs it, shared by the coordinator and the workers.

`stage` holds the plan types (stages, tasks, input boundaries) as DataFusion plan bytes;
`plan_node` a read-only view of a plan's tree; `display` and `graph` render a plan (text, and
Graphviz or Mermaid), with hooks for what a run measured. `task` runs one task (splice its
inputs into its plan, execute its partitions, write or stream them), with `session` (the
context tasks run in), and `dictionaries` and `view_arrays` (how dictionary and view columns are
written to exchange files). Nothing here knows of the network.
"""

from .display import display_distributed_plan, display_stage

__all__ = ["display_distributed_plan", "display_stage"]
