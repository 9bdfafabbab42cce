"""Telling DataFusion's failures apart from Python's own control flow."""

from __future__ import annotations


def is_datafusion_panic(exc: BaseException) -> bool:
    """Whether `exc` is a panic inside DataFusion's Rust code. It reaches Python as pyo3's
    PanicException, a BaseException (so `except Exception` misses it), yet it is an error of
    the query like any other."""
    return type(exc).__name__ == "PanicException"


CONTROL_FLOW = (KeyboardInterrupt, SystemExit, GeneratorExit)


def is_failure(exc: BaseException) -> bool:
    """Whether `exc` is a failure of the work at hand (any Exception, a panic inside DataFusion,
    another library's BaseException) rather than Python's own control flow (KeyboardInterrupt,
    SystemExit, GeneratorExit), which must go on as it is."""
    return not isinstance(exc, CONTROL_FLOW)


def failure_message(exc: BaseException) -> str:
    """The text of a failure: an Exception's own message, `panic inside DataFusion: <message>`
    for a panic, `<type>: <message>` for any other BaseException."""
    text = str(exc) or type(exc).__name__
    if is_datafusion_panic(exc):
        return f"panic inside DataFusion: {text}"
    return text if isinstance(exc, Exception) else f"{type(exc).__name__}: {text}"


def server_message(exc: BaseException) -> str:
    """A Flight error's message without the gRPC details Flight appends: the server's own words."""
    return str(exc).split(". Detail:")[0].split("\ngRPC client debug context")[0]


def first_line(message: str, limit: int = 300) -> str:
    """The first line of an error message, cut to `limit` characters (DataFusion's errors may
    end in a dump of the whole plan)."""
    line = message.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def readable_message(message: str, first: int = 500, total: int = 2000) -> str:
    """An error message kept readable: its first line cut to `first` characters and the whole
    to `total` (a plan dump inside a DataFusion error is cut, its explanation kept)."""
    head, _, rest = message.strip().partition("\n")
    text = first_line(head, first) + ("\n" + rest if rest else "")
    return text if len(text) <= total else text[: total - 1] + "…"
