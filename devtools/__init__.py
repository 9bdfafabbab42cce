"""Development programs of the repository, not shipped in the wheel: run them from a checkout
(`python -m devtools.<name>` at the repository root)."""
