"""The user's DataFusion settings that travel with a query's tasks, and the sessions they run in.

A task rebuilds its plan from bytes and runs it in the session of the worker (or of the
coordinator's head stage), not in the user's. Settings read while a plan is rebuilt or runs
must still be the user's, or an answer differs from single-node DataFusion's: with
`datafusion.execution.time_zone = '+05:00'`, `to_unixtime(s)` reads `s` in the time zone of the
session it runs in. So every `datafusion.execution.*` setting the user changed from DataFusion's
default goes with each task, except those the library sets for tasks itself; the other
namespaces (optimizer, SQL parser, catalog, explain, format) act while the coordinator plans, and
`datafusion.runtime.*` (memory and disk limits) belongs to the worker, which a plan must not change.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable

from datafusion import SessionConfig, SessionContext

from ..execution_plans.object_stores import ObjectStores, register_stores
from .session import REQUIRED_SETTINGS

#: Where the settings a task may carry live: the ones DataFusion reads while a plan runs.
TRAVELLING_PREFIX = "datafusion.execution."
#: Settings of that namespace the library sets for tasks itself: the partitions are already in
#: the plan (the coordinator plans with its own target), and a task's required settings stay.
LIBRARY_SETTINGS = frozenset({"datafusion.execution.target_partitions", *REQUIRED_SETTINGS})
MAX_SETTINGS = 256  # more than DataFusion has in the namespace
MAX_VALUE_CHARS = 4096
SESSIONS_KEPT = 16  # derived sessions a worker keeps, the most recently used

TaskSettings = tuple[tuple[str, str], ...]  # (name, value) pairs, sorted by name

_LINE = re.compile(r"^\t(datafusion\.[a-z0-9_.]+) = (.*)$")


def context_settings(ctx: SessionContext) -> dict[str, str]:
    """Every setting of `ctx` that has a value, as DataFusion prints it, read without changing
    `ctx`: its repr lists them one a line (settings without a value are left out)."""
    settings: dict[str, str] = {}
    last = None
    for line in repr(ctx).removesuffix("]").split("\n")[1:]:
        match = _LINE.match(line)
        if match:
            last = match.group(1)
            settings[last] = match.group(2)
        elif last is not None:  # a value with a line break in it
            settings[last] += "\n" + line
    return settings


@functools.cache
def _defaults() -> dict[str, str | None]:
    """DataFusion's default value of every setting (None for those without one)."""
    ctx = SessionContext(SessionConfig().with_information_schema(True))
    rows = ctx.sql("SELECT name, value FROM information_schema.df_settings").to_pylist()
    return {row["name"]: row["value"] for row in rows}


def travelling_settings(ctx: SessionContext) -> TaskSettings:
    """The settings of `ctx` a task of a query planned with it carries: those under
    `TRAVELLING_PREFIX` whose value differs from DataFusion's default, but the library's own."""
    defaults = _defaults()
    return tuple(
        sorted(
            (name, value)
            for name, value in context_settings(ctx).items()
            if is_travelling(name) and defaults.get(name) != value
        )
    )


def is_travelling(name: str) -> bool:
    """Whether a task may carry the setting `name` (its namespace, and not the library's own)."""
    return name.startswith(TRAVELLING_PREFIX) and name not in LIBRARY_SETTINGS


def check_task_settings(settings: TaskSettings) -> TaskSettings:
    """`settings` if a task may carry every one of them, else ValueError naming the first that
    it may not: an unknown name, one outside `TRAVELLING_PREFIX` (such as the worker's memory
    settings, `datafusion.runtime.*`), or one the library sets for tasks itself."""
    if len(settings) > MAX_SETTINGS:
        raise ValueError(f"a task carries at most {MAX_SETTINGS} settings, not {len(settings)}")
    known = _defaults()
    for name, value in settings:
        if name not in known:
            raise ValueError(f"unknown DataFusion setting {name[:80]!r}")
        if not is_travelling(name):
            raise ValueError(
                f"setting {name} may not travel with a task: only {TRAVELLING_PREFIX}* settings "
                f"do, except {', '.join(sorted(LIBRARY_SETTINGS))}"
            )
        if len(value) > MAX_VALUE_CHARS:
            raise ValueError(f"the value of {name} is longer than {MAX_VALUE_CHARS} characters")
    return settings


def with_settings(base: SessionContext, settings: TaskSettings) -> SessionContext:
    """A copy of `base` with `settings` applied; `base` itself when there are none.

    The copy shares `base`'s runtime (its memory pool and disk manager), object stores, tables
    and functions, so a worker's memory limit bounds its tasks whatever settings they carry.
    (DataFusion's Python API copies a context only through `enable_url_table`; a task's plan
    never looks tables up by name, so url tables change nothing.)"""
    if not settings:
        return base
    check_task_settings(settings)
    derived = base.enable_url_table()
    for name, value in settings:
        quoted = value.replace("'", "''")
        derived.sql(f"SET {name} = '{quoted}'")
    return derived


class TaskSessions:
    """The sessions tasks run in: one base session, built on first use by `build`, and copies
    of it with the settings tasks carry, the `SESSIONS_KEPT` most recently used kept.

    One base per worker means one memory pool per worker; a copy per distinct set of settings
    means queries with different settings (two users' time zones) never share one. Object
    stores live in the runtime, which copies share, so tasks carrying object stores run in a
    session built by `build` for that set of stores (a runtime, and so a memory pool, of its
    own), shared by every task carrying the same stores: a store one query brings is never
    seen by another query's tasks, and never replaces the store of a session hook for tasks
    that bring none. A `build` that fails is tried again by the next task."""

    def __init__(self, build: Callable[[], SessionContext], kept: int = SESSIONS_KEPT) -> None:
        self._build = build
        self._kept = kept
        self._base: SessionContext | None = None
        self._with_stores: OrderedDict[ObjectStores, SessionContext] = OrderedDict()
        self._derived: OrderedDict[tuple[TaskSettings, ObjectStores], SessionContext] = OrderedDict()
        self._lock = threading.Lock()

    def base(self) -> SessionContext:
        """The session tasks without settings run in (built now if it is not yet)."""
        with self._lock:
            if self._base is None:
                self._base = self._build()
            return self._base

    def session(self, settings: TaskSettings = (), stores: ObjectStores = ()) -> SessionContext:
        """The session a task carrying `settings` and object `stores` runs in."""
        if not settings:
            return self.stores_base(stores)
        return self._kept_session(
            self._derived, (settings, stores), lambda: with_settings(self.stores_base(stores), settings)
        )

    def stores_base(self, stores: ObjectStores) -> SessionContext:
        """The session tasks carrying `stores` and no settings run in: the base session when
        there are none, else one built for those stores, with them registered."""
        if not stores:
            return self.base()

        def build() -> SessionContext:
            session = self._build()
            register_stores(session, stores)
            return session

        return self._kept_session(self._with_stores, stores, build)

    def _kept_session(
        self, kept: OrderedDict, key: object, make: Callable[[], SessionContext]
    ) -> SessionContext:
        """The session kept under `key` in `kept`, or one `make` makes (outside the lock: other
        tasks go on meanwhile) and keeps, as the most recently used of at most `_kept`."""
        with self._lock:
            if key in kept:
                kept.move_to_end(key)
                return kept[key]
        session = make()
        with self._lock:
            kept[key] = session
            kept.move_to_end(key)
            while len(kept) > self._kept:
                kept.popitem(last=False)
        return session
