"""Splitting SQL text into statements at the `;` that end them, as DataFusion's SQL parser reads
it: a `;` inside a string, a quoted name or a comment ends nothing.

Pure functions, shared by `-f file.sql`, standard input and the interactive prompt (which uses
the unfinished rest to know that a statement goes on over the next line)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# A dollar-quoted string's opening tag: `$$` or `$name$` (`$1` is a parameter, not a tag).
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")


@dataclass(frozen=True)
class Statement:
    """One statement of a text: its SQL without the closing `;`, and the line it starts on."""

    sql: str
    line: int


@dataclass(frozen=True)
class Split:
    """A text cut into statements: those a `;` closed, and what follows the last of them.

    `rest` is an unfinished statement (or only blanks and comments, then `rest_is_empty`)."""

    statements: list[Statement]
    rest: Statement

    @property
    def rest_is_empty(self) -> bool:
        """Whether nothing but blanks and comments follows the last `;`."""
        return not self.rest.sql

    def all_statements(self) -> list[Statement]:
        """Every statement, the last one without its `;` included (a file may omit it)."""
        return self.statements + ([] if self.rest_is_empty else [self.rest])


def split_statements(text: str) -> Split:
    """Cut `text` at each `;` outside strings ('...', E'...', $$...$$), quoted names ("...")
    and comments (-- to the end of the line, /* ... */, which nest). Statements with nothing but
    blanks and comments are dropped. An unclosed string or comment runs to the end of `text`,
    and is left in `rest` (the prompt then asks for more lines).

    Examples:
        >>> [s.sql for s in split_statements("SELECT ';'; -- a; comment\\nSELECT 2;").statements]
        ["SELECT ';'", 'SELECT 2']
        >>> split_statements("SELECT 1; SELECT").rest
        Statement(sql='SELECT', line=1)
    """
    statements: list[Statement] = []
    code_at = -1  # its first character outside comments and blanks, or -1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == ";":
            if code_at >= 0:
                statements.append(_statement(text, code_at, i))
            code_at = -1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if text.startswith("/*", i):
            i = _block_comment_end(text, i)
            continue
        if code_at < 0:
            code_at = i
        if c == "'":
            i = _quoted_end(text, i, "'", backslash=_is_escape_string(text, i))
        elif c == '"':
            i = _quoted_end(text, i, '"', backslash=False)
        elif c == "$" and (tag := _DOLLAR_TAG.match(text, i)) and not _in_word(text, i):
            end = text.find(tag.group(), tag.end())
            i = n if end < 0 else end + len(tag.group())
        else:
            i += 1
    rest = _statement(text, code_at, n) if code_at >= 0 else Statement("", _line_of(text, n))
    return Split(statements, rest)


def _statement(text: str, code_at: int, end: int) -> Statement:
    """The statement from its first character of code to `end` (comments before it dropped)."""
    return Statement(text[code_at:end].strip(), _line_of(text, code_at))


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _block_comment_end(text: str, i: int) -> int:
    """Just past the `*/` closing the comment opened at `i`, counting nested `/*`."""
    depth = 0
    n = len(text)
    while i < n:
        if text.startswith("/*", i):
            depth += 1
            i += 2
        elif text.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    return n


def _quoted_end(text: str, i: int, quote: str, backslash: bool) -> int:
    """Just past the quote closing the one at `i`; a doubled quote (and, in an E'' string, a
    backslash) escapes it."""
    i += 1
    n = len(text)
    while i < n:
        c = text[i]
        if backslash and c == "\\":
            i += 2
        elif c == quote:
            if i + 1 < n and text[i + 1] == quote:
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return n


def _in_word(text: str, i: int) -> bool:
    """Whether `text[i]` continues a name (`a$b$` is a name, not a dollar quote)."""
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_$")


def _is_escape_string(text: str, i: int) -> bool:
    """Whether the quote at `i` opens E'...', where a backslash escapes the next character."""
    return i > 0 and text[i - 1] in "eE" and not _in_word(text, i - 1)
