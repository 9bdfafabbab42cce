"""What a coordinator's queries are doing, for people: the history of its queries with their
stages and tasks (`history`), progress callbacks (`progress`), the workers' state (`workers`),
the same records as SQL tables (`tables`), and a web dashboard over them (`server`, `access`,
and the page in `static/`).

Invariants:
- Observing never slows or fails a query: events only update records under one short lock;
  the web server, the workers' probes and progress callbacks run on threads of their own, and
  what they raise is logged, never passed to the query.
- Memory is bounded by `history_length`: running queries are always kept, finished ones
  beyond that many are dropped, oldest first; a finished query's plan text is made only when
  someone asks for it.
- The dashboard answers only on loopback unless the cluster's token (or a short-lived key
  made from it) comes with the request.
"""

from .history import Progress, QueryHistory

__all__ = ["Progress", "QueryHistory"]
