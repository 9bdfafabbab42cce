"""Telling DataFusion's failures apart from Python's own control flow."""

from __future__ import annotations

import ast
import re


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


# How DataFusion shows a Python exception raised inside it (a UDF's): pyo3's Rust debug form.
_PYERR = re.compile(
    r"PyErr \{ type: <class '(?P<type>[^']+)'>, value: (?P<value>.*?), "
    r'traceback: (?:None|Some\("(?P<traceback>(?:[^"\\]|\\.)*)"\)) \}',
    re.DOTALL,
)
_RUST_ESCAPE = re.compile(r"\\(u\{[0-9a-fA-F]+\}|.)", re.DOTALL)
_RUST_ESCAPED = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def _unescape_rust(text: str) -> str:
    """A string as Rust's debug form escaped it (`\\n`, `\\"`, `\\u{..}`), as it was."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code.startswith("u{"):
            return chr(int(code[2:-1], 16))
        return _RUST_ESCAPED.get(code, code)

    return _RUST_ESCAPE.sub(one, text)


def _exception_line(type_name: str, value: str) -> str:
    """`<type>: <message>` as Python prints an exception, from its type and its repr `value`
    (the repr itself when its arguments are not plain literals)."""
    short = type_name.rsplit(".", 1)[-1]
    if value.startswith(short + "(") and value.endswith(")"):
        try:
            args = ast.literal_eval(f"({value[len(short) + 1 : -1]},)") if value != f"{short}()" else ()
        except (ValueError, SyntaxError):
            args = None
        if isinstance(args, tuple):
            message = "" if not args else str(args[0]) if len(args) == 1 else str(args)
            return f"{type_name}: {message}" if message else type_name
    return f"{type_name}: {value}"


def python_errors_readable(message: str) -> str:
    """`message` with each Python exception DataFusion wrapped in it (a UDF raising) shown as
    Python shows it, `ValueError: bad input`, its traceback after the message, rather than
    pyo3's `PyErr { type: ..., value: ..., traceback: ... }` debug form."""
    tracebacks: list[str] = []

    def readable(match: re.Match[str]) -> str:
        if match.group("traceback"):
            tracebacks.append(_unescape_rust(match.group("traceback")).rstrip("\n"))
        return _exception_line(match.group("type"), match.group("value"))

    text = _PYERR.sub(readable, message)
    return "\n".join([text, *tracebacks])


def failure_message(exc: BaseException) -> str:
    """The text of a failure: an Exception's own message (a Python exception DataFusion wraps
    shown as Python shows it), `panic inside DataFusion: <message>` for a panic,
    `<type>: <message>` for any other BaseException."""
    text = python_errors_readable(str(exc)) or type(exc).__name__
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
    to `total` (a plan dump inside a DataFusion error is cut, its explanation kept), a Python
    exception inside it shown as Python shows it."""
    head, _, rest = python_errors_readable(message).strip().partition("\n")
    text = first_line(head, first) + ("\n" + rest if rest else "")
    return text if len(text) <= total else text[: total - 1] + "…"
