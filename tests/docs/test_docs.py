"""Every code block of README.md, docs/*.md and examples/*.md runs, and prints what the doc shows.

The conventions are in doc_blocks.py and docs/architecture.md ("Code in the docs"). Each file's
blocks run once, in order, in a subprocess (run_doc_blocks.py) inside a fresh folder laid out
like the repository root; each block is then one test, named by its file and line.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import pytest
from doc_blocks import CONSOLE, PYTHON, CodeBlock, console_commands, doc_blocks, normalise, output_matches

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").glob("*.md"))]
RUNNER = Path(__file__).with_name("run_doc_blocks.py")
FILE_TIMEOUT = 300.0  # seconds for all the blocks of one file (under pytest-timeout's 600)
STOP_TIMEOUT = 10.0  # seconds a stopped run has to delete its clusters' folders
TERMINAL_COLUMNS = "100"  # the width `--help` texts in the docs are wrapped at

BLOCKS = [block for doc in DOCS for block in doc_blocks(REPO, doc)]


@pytest.fixture(scope="session")
def sales_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The table examples/localhost_cluster.py writes, which several docs query."""
    spec = importlib.util.spec_from_file_location(
        "localhost_cluster", REPO / "examples" / "localhost_cluster.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    table = tmp_path_factory.mktemp("docs-data") / "sales"
    example.write_sales_table(table)
    return table


@dataclass(eq=False)  # hashable by identity, for the cached finish()
class DocRun:
    """One doc file's blocks running (or run) in their own folder."""

    doc: str
    blocks: list[CodeBlock]
    workdir: Path
    process: subprocess.Popen
    deadline: float

    @property
    def results_path(self) -> Path:
        return self.workdir / ".docs-test-results.json"

    @property
    def log_path(self) -> Path:
        return self.workdir / ".docs-test-output.log"

    def stop(self) -> None:
        """End the run and the workers it started: SIGTERM first, whose handlers delete the
        spool folders of the clusters the blocks made (SIGKILL would leave them in the temp
        folder), then SIGKILL if it has not ended within STOP_TIMEOUT."""
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    @cache  # noqa: B019 - one wait per run, for the session
    def finish(self) -> tuple[list[dict], list[str]]:
        """Wait for the run, within its deadline, and return each block's result and output."""
        try:
            returncode = self.process.wait(timeout=max(0.0, self.deadline - time.monotonic()))
            ended = f"the block runner exited with status {returncode}"
        except subprocess.TimeoutExpired:
            self.stop()
            ended = f"timed out after {FILE_TIMEOUT}s"
        results = json.loads(self.results_path.read_text()) if self.results_path.exists() else []
        if len(results) < len(self.blocks):
            results.append({"status": "failed", "error": f"{ended} in {self.blocks[len(results)].id}"})
        return results, _split_output(self.log_path.read_text(errors="replace"), len(self.blocks))


def start_doc(doc: str, workdir: Path, sales_table: Path) -> DocRun:
    """Start running a doc file's blocks in `workdir`, in a subprocess of its own."""
    _lay_out_like_the_repository(workdir, sales_table)
    blocks = [block for block in BLOCKS if block.doc == doc]
    spec = [
        {**asdict(b), "commands": [asdict(c) for c in console_commands(b)] if b.kind == CONSOLE else []}
        for b in blocks
    ]
    (workdir / ".docs-test-blocks.json").write_text(json.dumps(spec))
    with open(workdir / ".docs-test-output.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-u", str(RUNNER), ".docs-test-blocks.json", ".docs-test-results.json"],
            cwd=workdir,
            env=_environment(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so a timeout stops the workers it started too
        )
    return DocRun(doc, blocks, workdir, process, time.monotonic() + FILE_TIMEOUT)


@pytest.fixture(scope="session")
def doc_runs(tmp_path_factory: pytest.TempPathFactory, sales_table: Path):
    """A doc file's run, started on first use; the next file starts at the same time, so two
    files run at once (most of a file's time is spent waiting on its workers)."""
    runs: dict[str, DocRun] = {}
    order = list(dict.fromkeys(block.doc for block in BLOCKS))

    def start(doc: str) -> DocRun:
        if doc not in runs:
            runs[doc] = start_doc(doc, tmp_path_factory.mktemp(doc.replace("/", "-")), sales_table)
        return runs[doc]

    def run(doc: str) -> tuple[Path, list[dict], list[str]]:
        current = start(doc)
        following = order.index(doc) + 1
        if following < len(order):
            start(order[following])
        return (current.workdir, *current.finish())

    yield run
    for started in runs.values():  # runs never waited for (deselected tests) are stopped
        if started.process.poll() is None:
            started.stop()


def _lay_out_like_the_repository(workdir: Path, sales_table: Path) -> None:
    """The docs say "from the repository root": give the folder what they use from it."""
    (workdir / "data" / "examples").mkdir(parents=True)
    (workdir / "data" / "examples" / "sales").symlink_to(sales_table, target_is_directory=True)
    (workdir / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    (workdir / ".venv").symlink_to(sys.prefix, target_is_directory=True)


def _environment() -> dict[str, str]:
    """This Python's scripts first on PATH; no cluster settings inherited from the caller."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DATAFUSION_DISTRIBUTED_") or k.endswith("_DATA")
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = TERMINAL_COLUMNS
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


def _split_output(log: str, count: int) -> list[str]:
    """What each block printed, from the markers the runner writes between blocks."""
    outputs = []
    for i in range(count):
        start = log.find(f"\n@@docs-test block {i}@@\n")
        end = log.find(f"\n@@docs-test block {i + 1}@@\n")
        outputs.append(
            "" if start < 0 else log[start + len(f"\n@@docs-test block {i}@@\n") : end if end >= 0 else None]
        )
    return outputs


def _diff(expected: str, got: str) -> str:
    return "\n".join(
        difflib.unified_diff(
            expected.splitlines(), got.splitlines(), "shown in the doc", "printed", lineterm=""
        )
    )


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_block(block: CodeBlock, doc_runs) -> None:
    """The block runs without error, and prints the output the doc shows for it."""
    if block.skip_reason is not None:
        pytest.skip(f"{block.id}: {block.skip_reason}")
    workdir, results, outputs = doc_runs(block.doc)
    index = [b for b in BLOCKS if b.doc == block.doc].index(block)
    if index >= len(results):
        pytest.fail(f"{block.id} did not run: {results[-1].get('error')}")
    result, printed = results[index], outputs[index]
    if result["status"] != "ran":
        pytest.fail(f"{block.id} {result['status']}:\n{result.get('error')}\n--- output:\n{printed}")
    if block.kind == PYTHON and block.expected is not None:
        expected, got = normalise(block.expected), normalise(printed, workdir)
        assert output_matches(expected, got), f"{block.id} printed another output:\n{_diff(expected, got)}"
    if block.kind == CONSOLE:
        for command, out in zip(console_commands(block), result["outputs"], strict=True):
            expected, got = normalise(command.expected), normalise(out, workdir)
            assert output_matches(expected, got), (
                f"{block.doc}:{command.line} `{command.command}` printed another output:\n{_diff(expected, got)}"
            )
