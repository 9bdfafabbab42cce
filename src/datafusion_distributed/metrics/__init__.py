"""Per-task metrics collected from workers and the distributed plan rendered with them."""
