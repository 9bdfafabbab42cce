"""The docs test's conventions: which blocks run, which block is whose output, what is masked."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from doc_blocks import CONSOLE, PYTHON, SHELL, console_commands, doc_blocks, normalise, output_matches

DOC = """# A page

```python
print("hi")
```

```text
hi
```

Prose.

```python
x = 1
```

Not its output, since prose stands between:

```text
something else
```

<!-- docs-test: skip (needs other hosts) -->
```sh
ssh elsewhere
```

```console
$ echo one \\
    two
one two
$ true
```

```dot
digraph {}
```
"""


def _blocks(tmp_path: Path, text: str):
    (tmp_path / "page.md").write_text(text)
    return doc_blocks(tmp_path, tmp_path / "page.md")


def test_blocks_their_outputs_and_skips(tmp_path: Path) -> None:
    blocks = _blocks(tmp_path, DOC)
    assert [(b.id, b.kind) for b in blocks] == [
        ("page.md:3", PYTHON),
        ("page.md:13", PYTHON),
        ("page.md:24", SHELL),
        ("page.md:28", CONSOLE),
    ]
    assert blocks[0].expected == "hi\n"
    assert blocks[1].expected is None
    assert blocks[2].skip_reason == "needs other hosts"
    assert blocks[3].skip_reason is None


def test_console_commands_and_their_output(tmp_path: Path) -> None:
    console = _blocks(tmp_path, DOC)[3]
    commands = console_commands(console)
    assert [(c.line, c.command, c.expected) for c in commands] == [
        (29, "echo one \\\n    two", "one two"),
        (32, "true", ""),
    ]


@pytest.mark.parametrize(
    "marker",
    ["<!-- docs-test: skip -->", "<!-- docs-test: skp (typo) -->", "<!-- docs-test: skip () -->"],
)
def test_a_malformed_marker_is_an_error(tmp_path: Path, marker: str) -> None:
    with pytest.raises(ValueError, match="docs-test"):
        _blocks(tmp_path, f"{marker}\n```python\npass\n```\n")


def test_a_marker_before_no_runnable_block_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="before a ```text block"):
        _blocks(tmp_path, "<!-- docs-test: skip (why) -->\n```text\nx\n```\n")


def test_volatile_parts_are_masked(tmp_path: Path) -> None:
    shown = "Query ec8190ad91d74dc08f6da594ab6aec76: 36.59ms on grpc://127.0.0.1:40671 (pid 11658)"
    printed = f"Query 07e6cede851e4340a164119b7c653cd2: 2.1s on grpc://127.0.0.1:50051 (pid 2) {tmp_path}/x  "
    assert output_matches(normalise(shown) + " …/x", normalise(printed, tmp_path))


def test_other_differences_fail_unless_elided() -> None:
    assert not output_matches(normalise("4 rows"), normalise("5 rows"))
    assert not output_matches(normalise("a\nb"), normalise("a\nb\nc"))
    assert output_matches(normalise("a\n...\nc"), normalise("a\nb\nb\nc"))


def test_the_runner_reports_a_failing_block_and_stops_there(tmp_path: Path) -> None:
    blocks = _blocks(
        tmp_path,
        "```python\nprint('before')\n```\n\n```python\nraise ValueError('broken')\n```\n\n"
        "```console\n$ echo after\nafter\n```\n",
    )
    spec = [
        {**asdict(b), "commands": [asdict(c) for c in console_commands(b)] if b.kind == CONSOLE else []}
        for b in blocks
    ]
    (tmp_path / "blocks.json").write_text(json.dumps(spec))
    runner = Path(__file__).with_name("run_doc_blocks.py")
    done = subprocess.run(
        [sys.executable, "-u", str(runner), "blocks.json", "results.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["status"] for r in results] == ["ran", "failed", "not run"]
    assert 'page.md", line 6' in results[1]["error"] and "ValueError: broken" in results[1]["error"]
    assert "before" in done.stdout
