"""Sizes as people read them."""

from __future__ import annotations


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
