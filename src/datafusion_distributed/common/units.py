"""Sizes as people read and write them."""

from __future__ import annotations

import re

_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}  # fmt: skip


def format_bytes(n: float) -> str:
    """`n` bytes in B, KiB, MiB or GiB.

    Examples:
        >>> format_bytes(1536), format_bytes(12)
        ('1.5 KiB', '12 B')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def parse_bytes(text: str) -> int:
    """A byte count, plain or with a binary unit: `1048576`, `64MiB`, `64M`, `1GiB` (1024-based):
    the one reader of sizes for Python settings, SQL's `SET` and the command line.

    Raises:
        ValueError: `text` is not a byte count.

    Examples:
        >>> parse_bytes("64MiB"), parse_bytes("2k"), parse_bytes("1_048_576")
        (67108864, 2048, 1048576)
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text.replace("_", ""))
    unit = match and _BYTE_UNITS.get(match.group(2).lower())
    if not match or unit is None:
        raise ValueError(f"not a byte count: {text!r} (use e.g. 1048576, 64MiB or 1GiB)")
    return int(float(match.group(1)) * unit)
