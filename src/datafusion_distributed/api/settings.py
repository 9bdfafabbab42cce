"""The `distributed.*` settings namespace: each `DistributedConfig` field by name, which of them
a running context may change, their values read from SQL text and shown as text.

A change makes a new `DistributedConfig` with `dataclasses.replace`, so it is checked exactly
as a config made in Python is. The fields that shape how a context reaches its workers (its
embedded cluster, its token, its TLS files) are fixed when the context is made.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from ..common.units import parse_bytes
from ..distributed_planner.config import DistributedConfig, is_byte_size, unknown_setting
from .settings_statements import PREFIX

# Fields a context cannot change once made: why, for the error that refuses the change.
FIXED = {
    "embedded_workers": "the embedded cluster starts its workers when the context is made",
    "auth_token": "connections to workers carry it from when the context is made (and a secret does not belong in SQL text)",
    "tls_root_certs": "connections to workers are opened with it when the context is made",
    "tls_client_cert": "connections to workers are opened with it when the context is made",
    "tls_client_key": "connections to workers are opened with it when the context is made",
    "dashboard_port": "the dashboard starts with the context",
    "dashboard_host": "the dashboard starts with the context",
    "feed_host": "the feed service listens there from the context's first query reading a feed",
    "check_workers": "the workers given are checked once, before the context's first query",
}
SECRET = "auth_token"  # shown as set or unset, never its value

_FIELDS = {f.name: f for f in dataclasses.fields(DistributedConfig)}
_TYPES = typing.get_type_hints(DistributedConfig)
_NULLS = ("none", "null")
_BOOLS = {"true": True, "on": True, "1": True, "false": False, "off": False, "0": False}


class UnknownSetting(ValueError):
    """A name that is not a setting of the `distributed` namespace."""


def setting_names() -> list[str]:
    """Every setting's name, sorted, as SQL writes it (`distributed.partitions_per_task`, ...)."""
    return sorted(PREFIX + name for name in _FIELDS)


def check_name(name: str) -> None:
    """Raise UnknownSetting, listing the known names, unless `name` (without the prefix) is one.

    Raises:
        UnknownSetting: `name` is not a DistributedConfig field.
    """
    if name not in _FIELDS:
        raise UnknownSetting(unknown_setting(name, _FIELDS, PREFIX))


def check_changeable(name: str) -> None:
    """Raise ValueError, saying why and how to set it instead, if `name` is fixed for a context.

    Raises:
        UnknownSetting: `name` is not a setting.
        ValueError: `name` cannot change once the context is made.
    """
    check_name(name)
    if name in FIXED:
        raise ValueError(
            f"{PREFIX}{name} cannot be changed by SQL: {FIXED[name]}; "
            f"give it as DistributedConfig({name}=...) when making the DistributedContext"
        )


def _parse_number(name: str, kind: type, text: str) -> int | float:
    try:
        value: int | float = int(text) if kind is int else float(text)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise ValueError(f"{PREFIX}{name} takes {noun}, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{PREFIX}{name} takes a finite number, got {text!r}")
    return value


def parse_bool(text: str) -> bool:
    """`text` as a boolean, written as SQL's SET takes it: true/false, on/off or 1/0 (any case).

    Raises:
        ValueError: `text` is none of those.
    """
    value = _BOOLS.get(text.lower())
    if value is None:
        raise ValueError(f"not true or false: {text!r}")
    return value


def parse_value(name: str, text: str, quoted: bool = False) -> Any:
    """The value of setting `name` written as `text` in SQL, read by the field's type: a number
    (for a byte size, also with a unit: `64MiB`), a boolean (true/false, on/off, 1/0), a
    string, or None (`none` or `null`, for the settings
    that take None).

    Raises:
        UnknownSetting: `name` is not a setting.
        ValueError: `text` is not a value of the setting's type (the message names it).

    Examples:
        >>> parse_value("partitions_per_task", "4")
        4
        >>> parse_value("query_timeout", "NULL") is None
        True
        >>> parse_value("bytes_per_partition", "64MiB")
        67108864
    """
    check_name(name)
    hint = _TYPES[name]
    kinds = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) else {hint}
    optional = type(None) in kinds
    kinds.discard(type(None))
    if optional and text.lower() in _NULLS:
        return None
    (kind,) = kinds
    if kind is bool:
        try:
            return parse_bool(text)
        except ValueError:
            raise ValueError(f"{PREFIX}{name} takes true or false, got {text!r}") from None
    if kind is int and is_byte_size(name):
        try:
            return parse_bytes(text)
        except ValueError:
            raise ValueError(
                f"{PREFIX}{name} takes a byte count such as 1048576 or 64MiB, got {text!r}"
            ) from None
    if kind in (int, float):
        return _parse_number(name, kind, text)
    return text


def with_setting(config: DistributedConfig, name: str, text: str, quoted: bool = False) -> DistributedConfig:
    """`config` with setting `name` set to the value written `text`, checked as a new config is.

    Raises:
        UnknownSetting: `name` is not a setting.
        ValueError: the setting is fixed for a context, or the value is not valid for it.
    """
    check_changeable(name)
    return dataclasses.replace(config, **{name: parse_value(name, text, quoted)})


def format_value(value: Any) -> str | None:
    """A setting's value as SHOW shows it: None as null, booleans as DataFusion writes them."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def setting_rows(config: DistributedConfig, token_in_use: bool, name: str | None = None) -> dict[str, list]:
    """The columns `name` and `value` of SHOW: setting `name`, or every setting when None, sorted
    by name. The token shows only whether one is in use (`token_in_use`), never its value.

    Raises:
        UnknownSetting: `name` is not a setting.
    """
    if name is not None:
        check_name(name)
    names = [name] if name is not None else sorted(_FIELDS)
    values = [
        ("set" if token_in_use else "unset") if n == SECRET else format_value(getattr(config, n))
        for n in names
    ]
    return {"name": [PREFIX + n for n in names], "value": values}


def changed_settings(config: DistributedConfig) -> tuple[str, ...]:
    """`name=value` for each setting a query can change whose value is not its default, in field
    order: what `explain()` shows of the settings a plan was made and runs with."""
    changed = []
    for name, f in _FIELDS.items():
        if name in FIXED or f.default is dataclasses.MISSING:
            continue
        value = getattr(config, name)
        if value != f.default:
            changed.append(f"{name}={format_value(value)}")
    return tuple(changed)
