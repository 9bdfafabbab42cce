"""Units of work (file groups) handed to tasks as they ask for them instead of up front."""
