"""Differential SQL fuzzing: generated queries run single-node and distributed, compared
(see `run`; `python -m devtools.fuzz -h`)."""
