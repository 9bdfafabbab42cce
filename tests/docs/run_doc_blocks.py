"""Run the code blocks of one documentation file, in order, as a reader would.

    python run_doc_blocks.py BLOCKS.json RESULTS.json

Runs in the current folder. Python blocks share one namespace (`__main__`, like a script);
shell and console blocks run in bash, and the variables they export carry over to the next
one. Everything printed (by this process, the shells and any worker processes they start) goes
to stdout, split by marker lines so the caller can tell which block printed what; each result
is written to RESULTS.json as soon as it is known, so a run killed for taking too long still
says which block it was in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

BLOCK_MARKER = "@@docs-test block {}@@"
COMMAND_MARKER = "@@docs-test command {}@@"
SHELL_TIMEOUT = 120.0  # seconds for one shell or console block
ENV_FILE = ".docs-test-env.sh"  # what the previous shell block exported


def mark(text: str) -> None:
    """A marker on a line of its own, after everything printed so far."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(1, f"\n{text}\n".encode())


def run_python(block: dict, namespace: dict) -> dict:
    # Padding with blank lines makes tracebacks name the line in the markdown file.
    code = compile("\n" * block["line"] + block["code"], block["doc"], "exec")
    exec(code, namespace)
    return {}


def bash(script: str, capture: bool) -> subprocess.CompletedProcess:
    """Run a script in bash with the environment the previous shell block left."""
    prologue = f"[ -f {ENV_FILE} ] && source {ENV_FILE}\n"
    epilogue = f"\nexport -p > {ENV_FILE}\n"
    return subprocess.run(
        ["bash", "-c", prologue + script + epilogue],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
        text=True,
        timeout=SHELL_TIMEOUT,
    )


def run_shell(block: dict) -> dict:
    done = bash("set -e\n" + block["code"], capture=False)
    if done.returncode != 0:
        raise RuntimeError(f"the block exited with status {done.returncode}")
    return {}


def run_console(block: dict) -> dict:
    # Each command is followed by a marker, so one shell runs them all (an `export` carries
    # over) and the output still splits per command.
    script = "".join(
        f"{c['command']}\necho; echo '{COMMAND_MARKER.format(i)}'\n" for i, c in enumerate(block["commands"])
    )
    done = bash(script, capture=True)
    outputs, rest = [], done.stdout
    for i in range(len(block["commands"])):
        head, _, rest = rest.partition("\n" + COMMAND_MARKER.format(i) + "\n")
        outputs.append(head)
    return {"outputs": outputs}


RUNNERS = {"python": run_python, "shell": run_shell, "console": run_console}


def main(blocks_path: str, results_path: str) -> None:
    blocks = json.loads(Path(blocks_path).read_text())
    results: list[dict] = []
    namespace = {"__name__": "__main__"}
    failed_at = None
    for i, block in enumerate(blocks):
        mark(BLOCK_MARKER.format(i))
        if block["skip_reason"] is not None:
            result = {"status": "skipped"}
        elif failed_at is not None:
            result = {"status": "not run", "error": f"the block at line {failed_at} failed"}
        else:
            try:
                args = (block, namespace) if block["kind"] == "python" else (block,)
                result = {"status": "ran", **RUNNERS[block["kind"]](*args)}
            except BaseException:  # the block's own error, reported with its traceback
                result = {"status": "failed", "error": traceback.format_exc()}
                failed_at = block["line"]
        results.append(result)
        Path(results_path).write_text(json.dumps(results))
    mark(BLOCK_MARKER.format(len(blocks)))


if __name__ == "__main__":
    main(*sys.argv[1:])
