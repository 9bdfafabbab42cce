"""Read sqllogictest (`.slt`) files into records, as DataFusion's test runner does.

The format (https://www.sqlite.org/sqllogictest/doc/trunk/about.wiki, with the extensions of
the Rust `sqllogictest` crate DataFusion uses) is a sequence of records separated by blank
lines; `#` starts a comment line between records:

* ``statement ok|error [message]|count N`` followed by SQL up to a blank line (a
  ``statement error`` may put a multi-line message after ``----``);
* ``query <types> [rowsort|valuesort|nosort] [label]`` followed by SQL, ``----`` and the
  expected rows up to a blank line; ``query error [message]`` expects an error instead
  (again optionally with the message after ``----``);
* ``include <glob>`` (relative to the including file), ``halt``, ``hash-threshold N``,
  ``sleep <duration>``, ``control ...``;
* ``onlyif <engine>`` / ``skipif <engine>`` lines before a record make it conditional.

Every record keeps the file and the 1-based line it starts on, so reports point at it.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

__all__ = [
    "ENGINE_NAMES",
    "Condition",
    "Record",
    "RecordKind",
    "load_slt",
    "parse_slt",
]

#: The names this runner answers to in `onlyif` / `skipif` (compared case-insensitively).
ENGINE_NAMES: frozenset[str] = frozenset({"datafusion"})

RESULTS_DELIMITER = "----"
SORT_MODES = ("rowsort", "valuesort", "nosort")


class RecordKind(str, Enum):
    """What a record is: the directive that starts it."""

    STATEMENT = "statement"
    QUERY = "query"
    INCLUDE = "include"  # only left in a loaded file when its glob matched no file
    HALT = "halt"
    CONTROL = "control"  # control, hash-threshold, sleep: nothing to run
    UNSUPPORTED = "unsupported"  # a directive this runner does not know


@dataclass(frozen=True)
class Condition:
    """An `onlyif` or `skipif` line: `keyword` is one of those, `engine` the name after it."""

    keyword: str
    engine: str

    def skips_us(self) -> bool:
        """Whether this condition keeps the record from running in this runner."""
        ours = self.engine.lower() in ENGINE_NAMES
        return ours if self.keyword == "skipif" else not ours


@dataclass(frozen=True)
class Record:
    """One record of a `.slt` file.

    `expect_error` is set by `statement error` and `query error`; `error_message` holds the
    text after `error` (a regex in DataFusion's runner) or the block after `----`. `expected`
    holds a query's expected result lines. `argument` is the rest of the line for include,
    control and the like."""

    kind: RecordKind
    file: str
    line: int
    sql: str = ""
    expect_error: bool = False
    error_message: str = ""
    count: int | None = None
    types: str = ""
    sort_mode: str | None = None
    label: str | None = None
    expected: tuple[str, ...] = ()
    argument: str = ""
    conditions: tuple[Condition, ...] = ()

    @property
    def runnable(self) -> bool:
        """Whether the record runs SQL (a statement or a query)."""
        return self.kind in (RecordKind.STATEMENT, RecordKind.QUERY)

    def skip_reason(self) -> str | None:
        """Why this record does not run here (an `onlyif`/`skipif` for our engine), or None."""
        for condition in self.conditions:
            if condition.skips_us():
                return f"{condition.keyword} {condition.engine}"
        return None


def _block(
    lines: list[str], start: int, delimiter: bool, first_always: bool = False
) -> tuple[list[str], int, bool]:
    """Lines from `start` up to a blank line (or `----` when `delimiter`); returns them, the
    index after the block, and whether it ended at `----`. With `first_always` the first
    line belongs to the block even when blank (a record's SQL may start on the line after a
    blank one, as the Rust runner reads it)."""
    out = []
    i = start
    while i < len(lines):
        line = lines[i]
        if not line.strip() and not (first_always and i == start):
            return out, i, False
        if delimiter and line.strip() == RESULTS_DELIMITER:
            return out, i + 1, True
        out.append(line)
        i += 1
    return out, i, False


def _after_word(line: str, word: str) -> str:
    """The text of `line` after its first occurrence of `word` (one separating space dropped)."""
    rest = line.split(word, 1)[1] if word in line else ""
    return rest[1:] if rest.startswith(" ") else rest


def _sql_and_block(lines: list[str], start: int) -> tuple[str, list[str], bool, int]:
    """A record's SQL (from `start`), the block after `----` if any, whether there was one,
    and the index after the record."""
    sql, i, has_block = _block(lines, start, delimiter=True, first_always=True)
    block: list[str] = []
    if has_block:
        block, i, _ = _block(lines, i, delimiter=False)
    return "\n".join(sql), block, has_block, i


_DIRECTIVES = {
    "include": RecordKind.INCLUDE,
    "halt": RecordKind.HALT,
    "control": RecordKind.CONTROL,
    "hash-threshold": RecordKind.CONTROL,
    "sleep": RecordKind.CONTROL,
}


def parse_slt(text: str, file: str = "<string>") -> list[Record]:
    """Parse the text of a `.slt` file into records (includes are left as INCLUDE records)."""
    lines = [line.rstrip("\r") for line in text.split("\n")]
    records: list[Record] = []
    conditions: list[Condition] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        words = stripped.split()
        head = words[0]
        if head in ("onlyif", "skipif"):
            conditions.append(Condition(head, words[1] if len(words) > 1 else ""))
            i += 1
            continue
        base = Record(RecordKind.UNSUPPORTED, file, i + 1, conditions=tuple(conditions))
        conditions = []
        mode = words[1] if len(words) > 1 else ""
        if head == "statement":
            sql, block, has_block, i = _sql_and_block(lines, i + 1)
            if mode == "ok":
                record = replace(base, kind=RecordKind.STATEMENT, sql=sql)
            elif mode == "error":
                message = "\n".join(block) if has_block else _after_word(stripped, "error")
                record = replace(
                    base, kind=RecordKind.STATEMENT, sql=sql, expect_error=True, error_message=message
                )
            elif mode == "count" and len(words) > 2 and words[2].isdigit():
                record = replace(base, kind=RecordKind.STATEMENT, sql=sql, count=int(words[2]))
            else:
                record = replace(base, sql=sql, argument=stripped)
        elif head == "query":
            sql, block, has_block, i = _sql_and_block(lines, i + 1)
            if mode == "error":
                message = "\n".join(block) if has_block else _after_word(stripped, "error")
                record = replace(
                    base, kind=RecordKind.QUERY, sql=sql, expect_error=True, error_message=message
                )
            else:
                options = words[2:]
                sort_mode = options.pop(0) if options and options[0] in SORT_MODES else None
                record = replace(
                    base,
                    kind=RecordKind.QUERY,
                    sql=sql,
                    types=mode,
                    sort_mode=sort_mode,
                    label=options[0] if options else None,
                    expected=tuple(block),
                )
        elif head in _DIRECTIVES:
            record = replace(base, kind=_DIRECTIVES[head], argument=stripped[len(head) :].strip())
            i += 1
        else:  # an unknown directive: skip its whole record
            _, i, _ = _block(lines, i, delimiter=False)
            record = replace(base, argument=stripped)
        records.append(record)
    return records


def load_slt(path: str | os.PathLike, root: str | os.PathLike | None = None) -> list[Record]:
    """Parse a `.slt` file and, in place of each `include`, the records of the files its glob
    matches (sorted, relative to the including file). An include that matches nothing stays
    an INCLUDE record, so the runner can report it. Record files are named relative to
    `root` (default: the file's folder)."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    return _load(path, root, depth=0)


def _display_name(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _load(path: Path, root: Path, depth: int) -> list[Record]:
    if depth > 16:
        raise ValueError(f"{path}: includes nested more than 16 deep")
    records = []
    for record in parse_slt(path.read_text(encoding="utf-8"), _display_name(path, root)):
        if record.kind is not RecordKind.INCLUDE or record.skip_reason():
            records.append(record)
            continue
        pattern = os.path.join(path.parent, record.argument)
        matches = sorted(glob.glob(pattern))
        if not matches:
            records.append(record)
        for match in matches:
            records.extend(_load(Path(match), root, depth + 1))
    return records
