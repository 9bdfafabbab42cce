"""The distributed plan types (stages, tasks, boundaries) and how they display."""
