"""The interactive prompt of the `sql` command: statements end at `;` and may span lines,
backslash commands toggle what is shown, and one cluster serves every statement.

Ctrl-C clears the line being typed, or cancels the running query and returns to the prompt;
Ctrl-D (or `\\q`) leaves. Lines are edited and remembered with readline where Python has it."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .session import SqlSession
from .statements import split_statements

PROMPT = "dfd> "
CONTINUATION = "...> "  # a statement goes on: no `;` yet
HISTORY_LENGTH = 1000

HELP = """\
statements end with ';' and may span lines; Ctrl-C cancels a running query, Ctrl-D quits
  \\q              quit
  \\timing         show each statement's time (toggle)
  \\explain        print each query's distributed plan instead of running it (toggle)
  \\progress       draw a live progress line while a query runs (toggle)
  \\d              list tables and views
  \\d NAME         the columns of table NAME
  \\i FILE         run the statements of FILE
  \\?              this help"""


def history_path() -> Path:
    """Where the prompt's history is kept: `$XDG_STATE_HOME/datafusion-distributed/history`
    when XDG_STATE_HOME is set, `~/.datafusion_distributed_history` otherwise."""
    state = os.environ.get("XDG_STATE_HOME")
    if state:
        return Path(state) / "datafusion-distributed" / "history"
    return Path.home() / ".datafusion_distributed_history"


class _History:
    """readline's history, loaded from and saved to `history_path()`; nothing without readline."""

    def __init__(self) -> None:
        try:
            import readline
        except ImportError:  # not on every platform; the prompt works without editing
            self._readline = None
            return
        self._readline = readline
        readline.set_auto_history(False)  # a statement of several lines is one entry
        readline.set_history_length(HISTORY_LENGTH)
        try:
            readline.read_history_file(history_path())
        except OSError:  # none yet, or unreadable: start afresh
            pass

    def add(self, entry: str) -> None:
        if self._readline is not None and entry.strip():
            self._readline.add_history(" ".join(entry.split("\n")))

    def save(self) -> None:
        if self._readline is None:
            return
        path = history_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._readline.write_history_file(path)
        except OSError as exc:  # a read-only home must not lose the session's work
            print(f"warning: history not saved to {path}: {exc}", file=sys.stderr)


class Shell:
    """The read-run-print loop over one `SqlSession` (see the module docstring)."""

    def __init__(self, session: SqlSession, read_line: Callable[[str], str] = input) -> None:
        self.session = session
        self.read_line = read_line
        self.done = False
        self._commands: dict[str, Callable[[str], None]] = {
            "q": self._quit,
            "timing": self._toggle("timing", "timing"),
            "explain": self._toggle("explain", "explain (plans instead of results)"),
            "progress": self._toggle_progress,
            "d": self._describe,
            "i": self._include,
            "?": lambda _: print(HELP, file=self.session.out),
        }

    def run(self) -> int:
        """Read and run statements until `\\q` or the end of input; return the exit code (0)."""
        history = _History()
        print(
            r"datafusion-distributed: end statements with ';', \? for help, \q to quit", file=self.session.err
        )
        lines: list[str] = []
        try:
            while not self.done:
                try:
                    line = self.read_line(CONTINUATION if lines else PROMPT)
                except EOFError:  # Ctrl-D
                    print(file=self.session.out)
                    break
                except KeyboardInterrupt:  # Ctrl-C: drop what was typed
                    print(file=self.session.out)
                    lines = []
                    continue
                if not lines and line.lstrip().startswith("\\"):
                    history.add(line.strip())
                    self.command(line.strip()[1:])
                    continue
                lines.append(line)
                split = split_statements("\n".join(lines))
                for statement in split.statements:
                    history.add(statement.sql + ";")
                    self.execute(functools.partial(self.session.run, statement.sql))
                lines = [] if split.rest_is_empty else [split.rest.sql]
        finally:
            history.save()
        return 0

    def execute(self, action: Callable[[], None]) -> None:
        """Run `action`; an error or a cancelled query is reported and the prompt goes on."""
        try:
            action()
        except KeyboardInterrupt:
            print("cancelled", file=self.session.err, flush=True)
        except Exception as exc:
            print(f"error: {exc}", file=self.session.err, flush=True)
        except SystemExit as exc:  # a refusal worded for the command line: still not an exit here
            print(exc, file=self.session.err, flush=True)

    def command(self, text: str) -> None:
        """Carry out the backslash command `text` (without its backslash)."""
        name, _, argument = text.partition(" ")
        action = self._commands.get(name)
        if action is None:
            print(f"unknown command \\{name}: \\? lists them", file=self.session.err)
            return
        self.execute(lambda: action(argument.strip()))

    def _quit(self, _: str) -> None:
        self.done = True

    def _toggle(self, option: str, label: str) -> Callable[[str], None]:
        def toggle(argument: str) -> None:
            value = _switch(argument, getattr(self.session.show, option))
            setattr(self.session.show, option, value)
            print(f"{label} {'on' if value else 'off'}", file=self.session.err)

        return toggle

    def _toggle_progress(self, argument: str) -> None:
        self.session.dctx.progress = _switch(argument, self.session.dctx.progress)
        print(f"progress {'on' if self.session.dctx.progress else 'off'}", file=self.session.err)

    def _describe(self, argument: str) -> None:
        if argument:
            self.session.describe(argument)
        else:
            self.session.list_tables()

    def _include(self, argument: str) -> None:
        if not argument:
            raise ValueError(r"\i needs a file name")
        self.session.run_script(Path(argument).read_text(encoding="utf-8"), argument)


def _switch(argument: str, current: bool) -> bool:
    """A toggle's new value: `on` or `off` as given, else the opposite of `current`."""
    word = argument.lower()
    if word in ("on", "off"):
        return word == "on"
    if word:
        raise ValueError(f"expected on or off, got {argument!r}")
    return not current
