"""Clean-up before SIGTERM or SIGHUP ends the process.

Python turns SIGINT into KeyboardInterrupt, which unwinds the program and runs `atexit`; by
default SIGTERM and SIGHUP (a closed terminal) end it at once, leaving behind the worker
processes and temporary folders it started. Code that starts such things registers a clean-up
here (`at_exit_signal`) and forgets it once it has cleaned up itself (`forget`).

While a cluster is alive (a registration with `holds_handlers`), SIGTERM and SIGHUP are handled:
the handler runs every registered clean-up, newest first, in the main thread, then ends the
process by the same signal with its default action, so its exit status is the signal's. The
handlers are installed only from the main thread and only over the default action: a program's
own handler, or a signal it ignores, is left as it is. They are put back when the last cluster
is forgotten (from the main thread; elsewhere they stay, and with nothing registered they do
what the default action does). A forked child (multiprocessing) starts with nothing
registered: the clusters are its parent's, and its own end must not touch them.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
from collections.abc import Callable

EXIT_SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)

log = logging.getLogger(__name__)

_lock = threading.RLock()  # reentrant: the handler may interrupt its holder in the main thread
_cleanups: dict[int, Callable[[], object]] = {}
_holders: set[int] = set()
_keys = itertools.count()
_ending: list[int] = []  # the signal being handled, while its clean-ups run


def _forget_all_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # another thread of the parent may have held it
    _cleanups.clear()
    _holders.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_all_in_child)


def at_exit_signal(cleanup: Callable[[], object], *, holds_handlers: bool = False) -> int:
    """Run `cleanup` if SIGTERM or SIGHUP ends the process before `forget(key)`; return the key.

    With `holds_handlers` (a cluster), the handlers are installed while the key is registered,
    if this is the main thread and the signals are left to their default action."""
    with _lock:
        key = next(_keys)
        _cleanups[key] = cleanup
        if holds_handlers:
            _holders.add(key)
            _install()
    return key


def forget(key: int) -> None:
    """Drop a clean-up registered by `at_exit_signal` (its owner cleaned up); forgetting the
    last cluster puts the default handlers back."""
    with _lock:
        _cleanups.pop(key, None)
        if key in _holders:
            _holders.discard(key)
            if not _holders:
                _restore()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _install() -> None:
    if not _in_main_thread():
        return
    for sig in EXIT_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _on_exit_signal)


def _restore() -> None:
    if not _in_main_thread() or _ending:
        return
    for sig in EXIT_SIGNALS:
        if signal.getsignal(sig) is _on_exit_signal:
            signal.signal(sig, signal.SIG_DFL)


def _run_cleanups() -> None:
    """Run every registered clean-up now, newest first; one that fails does not stop the others."""
    for key in reversed(list(_cleanups)):
        cleanup = _cleanups.pop(key, None)
        if cleanup is None:
            continue
        try:
            cleanup()
        except Exception:  # the process is ending: clean up what can be
            log.exception("clean-up before exit failed")


def _on_exit_signal(signum: int, frame: object) -> None:
    """Clean up, then end the process by `signum` as if this handler had not been installed."""
    if _ending:  # the same or the other signal again, while cleaning up: finish that first
        return
    _ending.append(signum)
    try:
        _run_cleanups()
    finally:  # even if Ctrl-C interrupted the clean-up: the process was asked to end
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # only reached if the signal is blocked
