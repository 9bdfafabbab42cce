"""How the processes the library starts give freed memory back to the OS.

DataFusion's and pyarrow's wheels allocate with mimalloc, which hands pages that fell free back
to the OS 10 ms later by decommitting them (`madvise(MADV_DONTNEED)`): the next allocation
faults them in again and the kernel zeroes each one. A query frees and allocates hundreds of MB
in bursts, so on TPC-H SF 1 worker processes spent about a fifth of their CPU time in the
kernel. With `MIMALLOC_PURGE_DECOMMITS=0` mimalloc hands them back lazily instead
(`MADV_FREE`): the kernel takes them when it needs memory, and until then the next batch, stage
or query reuses them without a fault. The suite ran 16-19% faster over worker processes
(benchmarks/README.md, "Freed memory handed back lazily"). Pages handed back lazily still
count in a process's resident size until the kernel takes them, so peaks read higher.

mimalloc reads its settings once, when the process first allocates, so this is set before
DataFusion is imported, and only in the processes the library starts: those of the command line
(workers, the `sql` shell) and Ray's worker actors (through their `runtime_env`). A process of
the user's own keeps the settings it started with. A value the user set is kept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

DECOMMIT_VARIABLE = "MIMALLOC_PURGE_DECOMMITS"


def hand_back_lazily(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Have mimalloc hand freed pages back lazily unless the environment says otherwise; True
    when the setting takes effect (neither DataFusion nor pyarrow imported yet)."""
    environ.setdefault(DECOMMIT_VARIABLE, "0")
    return "datafusion" not in sys.modules and "pyarrow" not in sys.modules


def runtime_env_handing_back_lazily(runtime_env: Mapping[str, Any] | None) -> dict[str, Any]:
    """A Ray `runtime_env` whose processes start with the setting, unless its `env_vars` give one."""
    env = dict(runtime_env or {})
    env_vars = dict(env.get("env_vars") or {})
    hand_back_lazily(env_vars)
    env["env_vars"] = env_vars
    return env
