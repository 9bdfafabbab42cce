"""The code blocks of the documentation, and how their shown output is compared.

Conventions (docs/architecture.md, "Code in the docs"):

- ```python blocks of one file run in order, in one namespace; a block that is not run (```text,
  ```dot, ...) and follows a python block with only blank lines between them is the output it
  prints (stdout and stderr together).
- ```sh / ```bash / ```shell blocks run as a bash script that must succeed; their output is
  not compared.
- ```console blocks are terminal sessions: each `$ command` (continued by a trailing `\\`)
  runs, and the lines up to the next `$` are its output.
- `<!-- docs-test: skip (reason) -->` right before a fence skips that block, with the reason.
- Output is compared after masking what differs between runs (ports, query ids, durations,
  timestamps, process ids, the folder the blocks run in), and `...` in the doc matches
  anything, as in doctest's ELLIPSIS.
"""

from __future__ import annotations

import doctest
import re
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

PYTHON = "python"
SHELL = "shell"
CONSOLE = "console"
KINDS = {"python": PYTHON, "py": PYTHON, "sh": SHELL, "bash": SHELL, "shell": SHELL, "console": CONSOLE}

_MARKER = re.compile(r"<!--\s*docs-test:(.*?)-->", re.DOTALL)
_SKIP = re.compile(r"\s*skip\s*\((.+)\)\s*$", re.DOTALL)


@dataclass(frozen=True)
class CodeBlock:
    """One runnable fenced block: where it is, what it runs, what it should print."""

    doc: str  # path relative to the repository root
    line: int  # 1-based line of the opening fence
    kind: str  # PYTHON, SHELL or CONSOLE
    code: str
    expected: str | None = None  # shown output of a python block
    skip_reason: str | None = None

    @property
    def id(self) -> str:
        """The pytest id: file and line, so a failing block is found at once."""
        return f"{self.doc}:{self.line}"


@dataclass(frozen=True)
class ConsoleCommand:
    """One `$ command` of a console block and the output shown under it."""

    line: int
    command: str
    expected: str


def doc_blocks(root: Path, doc: Path) -> list[CodeBlock]:
    """The runnable blocks of one markdown file, in order.

    Raises ValueError on a `docs-test:` comment that is not a skip with a reason, or one
    that is not followed by a runnable block, so a typo cannot silently skip nothing.
    """
    relative = doc.relative_to(root).as_posix()
    tokens = MarkdownIt().parse(doc.read_text(encoding="utf-8"))
    blocks: list[CodeBlock] = []
    pending_skip: str | None = None
    previous_python: int | None = None  # index in blocks of a python block awaiting its output
    for token in tokens:
        if token.type == "html_block" and _MARKER.search(token.content):
            pending_skip = _skip_reason(token.content, relative, token.map[0] + 1)
            continue
        if token.type != "fence":
            if token.map is not None and token.level == 0:
                previous_python = None  # prose between a block and a text block: not its output
            continue
        line = token.map[0] + 1
        language = token.info.strip().split(" ")[0].lower()
        kind = KINDS.get(language)
        if kind is None and previous_python is not None:
            block = blocks[previous_python]
            blocks[previous_python] = CodeBlock(
                block.doc, block.line, block.kind, block.code, token.content, block.skip_reason
            )
        if kind is None:
            if pending_skip is not None:
                raise ValueError(f"{relative}:{line}: a docs-test skip marker before a ```{language} block")
            previous_python = None
            continue
        blocks.append(CodeBlock(relative, line, kind, token.content, None, pending_skip))
        pending_skip = None
        previous_python = len(blocks) - 1 if kind == PYTHON else None
    if pending_skip is not None:
        raise ValueError(f"{relative}: a docs-test skip marker at the end, before no block")
    return blocks


def _skip_reason(comment: str, doc: str, line: int) -> str:
    match = _SKIP.match(_MARKER.search(comment).group(1))
    if match is None:
        raise ValueError(f"{doc}:{line}: a docs-test comment must read <!-- docs-test: skip (reason) -->")
    return " ".join(match.group(1).split())


def console_commands(block: CodeBlock) -> list[ConsoleCommand]:
    """Split a console block into its `$ command`s and the output shown under each."""
    commands: list[ConsoleCommand] = []
    lines = block.code.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise ValueError(f"{block.id}: console output before any `$ ` command: {lines[i]!r}")
        start = i
        command = [lines[i][2:]]
        while command[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        commands.append(ConsoleCommand(block.line + 1 + start, "\n".join(command), "\n".join(output)))
    return commands


# What differs from run to run, masked on both sides before comparing.
_VOLATILE = [
    (re.compile(r"\b[0-9a-f]{32}\b"), "<id>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"), "<timestamp>"),
    (re.compile(r"\b(?:127\.0\.0\.1|localhost):\d+"), "127.0.0.1:<port>"),
    (re.compile(r"\b(?:\d+\.\d+ ?|\d+)(?:ns|µs|us|ms|s)\b"), "<time>"),
    (re.compile(r"\bpid \d+"), "pid <pid>"),
]


def normalise(text: str, workdir: Path | None = None) -> str:
    """Mask the parts of an output that change between runs, and trailing blanks."""
    if workdir is not None:
        for path in {str(workdir.resolve()), str(workdir)}:
            text = text.replace(path, "…")
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def output_matches(expected: str, got: str) -> bool:
    """Whether normalised output matches the doc's, where `...` stands for anything."""
    return doctest.OutputChecker().check_output(expected + "\n", got + "\n", doctest.ELLIPSIS)
