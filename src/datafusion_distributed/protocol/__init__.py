"""How the coordinator and workers talk: messages (`messages`, validated JSON with plan bytes),
the Arrow Flight transport (`flight`, which also decides when an error means a worker was lost),
fetching another task's output (`fetch`), worker resolution (`resolver`) and the shared token and
TLS (`auth`).
"""
