"""Recognise the SQL statements of the `distributed.*` settings namespace: `SET distributed.x =
value`, `SHOW distributed.x`, `SHOW distributed` and `RESET distributed.x`.

DataFusion knows no `distributed` namespace, so these statements are answered by the
`DistributedContext` before DataFusion sees the query. Only a whole statement is recognised
(leading comments, any case and whitespace, and one trailing semicolon allowed), so the same
words inside other SQL, a string literal say, are left to DataFusion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "distributed."  #: how every setting of the namespace is named in SQL

_LEADING = r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*"
_NAME = r"distributed\.(?P<name>[a-z_][a-z0-9_]*)"
# A quoted string ('' escapes a quote), a double-quoted identifier, or a bare word or number.
_VALUE = r"(?P<value>'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|[^\s;'\"]+)"
_END = r"\s*;?\s*(?:--[^\n]*)?\s*$"
_FLAGS = re.IGNORECASE | re.DOTALL

_SET = re.compile(_LEADING + r"set\s+" + _NAME + r"(?:\s*=\s*|\s+to\s+)" + _VALUE + _END, _FLAGS)
_SHOW = re.compile(_LEADING + r"show\s+distributed(?:\.(?:\*|(?P<name>[a-z_][a-z0-9_]*)))?" + _END, _FLAGS)
_RESET = re.compile(_LEADING + r"reset\s+" + _NAME + _END, _FLAGS)
# What looks like one of these statements, well formed or not: a malformed one gets an error
# that shows the syntax, rather than DataFusion's "could not find config namespace".
_LOOKS_LIKE = re.compile(_LEADING + r"(?P<verb>set|show|reset)\s+distributed(?:\.|\s|;|$)", _FLAGS)

SYNTAX = {
    "set": "SET distributed.<name> = <value>",
    "show": "SHOW distributed.<name>, or SHOW distributed for every setting",
    "reset": "RESET distributed.<name>",
}


@dataclass(frozen=True)
class SetSetting:
    """`SET distributed.<name> = <value>`: `value` as written, without its quotes if it had any."""

    name: str
    value: str
    quoted: bool


@dataclass(frozen=True)
class ShowSettings:
    """`SHOW distributed.<name>` (`name`), or `SHOW distributed` (`name` None: all of them)."""

    name: str | None


@dataclass(frozen=True)
class ResetSetting:
    """`RESET distributed.<name>`: back to the value the context was made with."""

    name: str


SettingsStatement = SetSetting | ShowSettings | ResetSetting


class MalformedSettingsStatement(ValueError):
    """A statement about the `distributed` namespace that is not written as one of its forms."""


def _unquote(value: str) -> tuple[str, bool]:
    """`value` without its quotes (and with doubled quotes made single), and whether it had any."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        quote = value[0]
        return value[1:-1].replace(quote * 2, quote), True
    return value, False


def parse_settings_statement(query: str) -> SettingsStatement | None:
    """The settings statement `query` is, or None when it is any other SQL.

    Raises:
        MalformedSettingsStatement: `query` starts like a statement of the namespace but is not
            one of its forms (the message shows the form).

    Examples:
        >>> parse_settings_statement("set Distributed.Partitions_Per_Task to 4;")
        SetSetting(name='partitions_per_task', value='4', quoted=False)
        >>> parse_settings_statement("SHOW distributed")
        ShowSettings(name=None)
        >>> parse_settings_statement("SELECT 'SET distributed.x = 1'") is None
        True
    """
    if (match := _SET.match(query)) is not None:
        value, quoted = _unquote(match.group("value"))
        return SetSetting(match.group("name").lower(), value, quoted)
    if (match := _SHOW.match(query)) is not None:
        name = match.group("name")
        return ShowSettings(name.lower() if name else None)
    if (match := _RESET.match(query)) is not None:
        return ResetSetting(match.group("name").lower())
    if (match := _LOOKS_LIKE.match(query)) is not None:
        verb = match.group("verb").lower()
        raise MalformedSettingsStatement(
            f"could not read {query.strip()!r}: write {SYNTAX[verb]} (one statement, "
            "the value a number, a word or a quoted string)"
        )
    return None
