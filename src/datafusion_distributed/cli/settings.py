"""The `sql` command's flags for `DistributedConfig`: one per setting, made from the dataclass's
fields so a new setting gets its flag, its type and its help (the docstrings' `Attributes`)
without being written twice."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from collections.abc import Callable
from typing import Any

from .. import DistributedConfig
from ..api.settings import parse_bool
from ..common import units

# Settings with no flag, and why: a command line is visible to every user of the machine.
WITHOUT_FLAG = {"auth_token": "set DATAFUSION_DISTRIBUTED_TOKEN instead: a command line is visible to others"}

_DEST_PREFIX = "setting_"


def flag_of(name: str) -> str:
    """The flag of setting `name`: `partitions_per_task` -> `--partitions-per-task`."""
    return "--" + name.replace("_", "-")


def parse_bytes(text: str) -> int:
    """A byte count for a flag (see `common.units.parse_bytes`): `1048576`, `64MiB`, `1GiB`.

    Examples:
        >>> parse_bytes("64MiB"), parse_bytes("2k"), parse_bytes("100")
        (67108864, 2048, 100)
    """
    try:
        return units.parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def attribute_docs(cls: type) -> dict[str, str]:
    """Each field's text in the `Attributes:` sections of `cls` and its bases, by field name
    (an entry `a, b: text` documents both)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        section = re.search(r"^\s*Attributes:\n(.*?)(?:^\s*\n|\Z)", inspect.getdoc(klass) or "", re.S | re.M)
        if not section:
            continue
        for entry in re.split(r"\n(?=\S)", inspect.cleandoc(section.group(1))):
            names, _, text = entry.partition(":")
            for name in names.split(","):
                docs[name.strip()] = " ".join(text.split())
    return docs


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[.)])\s+(?=[A-Z])", text, maxsplit=1)[0]


def _shown_default(field: dataclasses.Field) -> str:
    """The field's default as `--help` shows it: byte counts in MiB when whole."""
    default = field.default
    if "bytes" in field.name and isinstance(default, int) and default and default % (1 << 20) == 0:
        return f"{default >> 20}MiB"
    return str(default)


def _converter(field: dataclasses.Field) -> tuple[Callable[[str], Any], str]:
    """How a flag's text becomes the field's value, and the word `--help` shows for it."""
    kind = str(field.type)
    optional = "None" in kind
    base: Callable[[str], Any]
    if "bool" in kind:
        base, metavar = parse_bool, "true|false"
    elif "bytes" in field.name and "int" in kind:
        base, metavar = parse_bytes, "BYTES"
    elif "int" in kind:
        base, metavar = int, "N"
    elif "float" in kind:
        base, metavar = float, "SECONDS" if "timeout" in field.name else "X"
    else:
        base, metavar = str, "PATH" if field.name.startswith("tls_") else field.name.upper()

    def convert(text: str) -> Any:
        if optional and text.lower() == "none":
            return None
        try:
            return base(text)
        except ValueError as exc:
            kind = {int: "whole number", float: "number", parse_bool: "true or false"}.get(
                base, base.__name__
            )
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind}") from exc

    convert.__name__ = base.__name__  # argparse names the type in its messages
    # "none" is worth showing where it changes something: the default is not None already
    return convert, metavar + ("|none" if optional and field.default is not None else "")


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for every `DistributedConfig` field but those in `WITHOUT_FLAG`, in one group."""
    group = parser.add_argument_group(
        "distributed settings",
        "DistributedConfig fields (docs/configuration.md); unset ones keep their default",
    )
    docs = attribute_docs(DistributedConfig)
    for field in dataclasses.fields(DistributedConfig):
        if field.name in WITHOUT_FLAG:
            continue
        convert, metavar = _converter(field)
        default = _shown_default(field)
        text = _first_sentence(docs.get(field.name, field.name.replace("_", " ")))
        group.add_argument(
            flag_of(field.name),
            dest=_DEST_PREFIX + field.name,
            type=convert,
            metavar=metavar,
            default=argparse.SUPPRESS,  # absent unless given: None is a value of some settings
            help=f"{text.rstrip('.')} (default: {default})".replace("%", "%%"),
        )


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, by field name."""
    return {
        key[len(_DEST_PREFIX) :]: value for key, value in vars(args).items() if key.startswith(_DEST_PREFIX)
    }


def config_from_args(args: argparse.Namespace) -> DistributedConfig:
    """A `DistributedConfig` of the flags given (the defaults for the others).

    Raises:
        SystemExit: a setting is out of range: the message names its flag."""
    given = settings_from_args(args)
    try:
        return DistributedConfig(**given)
    except ValueError as exc:
        flags = [flag_of(name) for name in given if name in str(exc)]
        raise SystemExit(f"error: {exc} ({', '.join(flags) or 'see --help'})") from None
