"""Clusters the library starts itself, each a resolver that lists its workers' URLs: in-process
Flight workers (`embedded`, the default), worker subprocesses on this machine (`local`), and
workers as Ray actors (`ray`, imported only when `RayCluster` is used, so Ray stays optional).

Below the public API and above the run: a cluster starts workers, and never runs a query."""
