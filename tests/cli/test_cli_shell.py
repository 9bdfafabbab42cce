"""The `sql` command's interactive prompt, driven through a pseudo-terminal as a user would:
multi-line statements, toggles, errors that leave the prompt running, Ctrl-C cancelling a query
or clearing a line, Ctrl-D and `\\q` leaving, history kept. Answers are single-node DataFusion's."""

from __future__ import annotations

import io
import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext
from datafusion_distributed.api.dataframe import format_table
from datafusion_distributed.cli.session import ShowOptions, SqlSession
from datafusion_distributed.cli.shell import CONTINUATION, PROMPT, Shell

pexpect = pytest.importorskip("pexpect")

WAIT = 60  # seconds any one expected output may take, so that nothing hangs
SUMS = "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k ORDER BY k"
LONG = "SELECT count(*) AS n FROM generate_series(1, 20000000000) AS g"  # minutes unless cancelled


def single_node(table_dir, query: str) -> str:
    ctx = SessionContext()
    ctx.register_parquet("t", str(table_dir))
    return format_table(ctx.sql(query).to_arrow_table())


@contextmanager
def terminal(home, *args: str) -> Iterator[pexpect.spawn]:
    """The command on a pseudo-terminal, with `home` as its home (for the history file)."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_STATE_HOME"}
    env.update(HOME=str(home), TERM="xterm", COLUMNS="120", LINES="40")
    child = pexpect.spawn(
        sys.executable, ["-m", "datafusion_distributed", *args], env=env, encoding="utf-8", timeout=WAIT
    )
    try:
        yield child
    finally:
        child.terminate(force=True)


def output(child) -> str:
    """What was printed before the last match, with the terminal's line ends made plain."""
    return child.before.replace("\r\n", "\n")


def test_an_interactive_session(tmp_path, table_dir):
    with terminal(tmp_path, "sql", "--table", f"t={table_dir}/", "--no-progress") as child:
        child.expect_exact(PROMPT)
        child.sendline("SELECT k, sum(v) AS s, count(*) AS n")  # one statement over three lines
        child.expect_exact(CONTINUATION)
        child.sendline("FROM t GROUP BY k")
        child.expect_exact(CONTINUATION)
        child.sendline("ORDER BY k;")
        child.expect_exact(PROMPT)
        assert single_node(table_dir, SUMS) in output(child)
        assert "4 row(s) in " in output(child)

        child.sendline("\\timing")
        child.expect_exact("timing off")
        child.expect_exact(PROMPT)
        child.sendline("SELEC 1;")  # an error is shown, and the prompt goes on
        child.expect_exact(PROMPT)
        assert "error: SQL error: ParserError" in output(child)

        child.sendline("CREATE VIEW big AS SELECT * FROM t WHERE v > 390;")  # lasts for the session
        child.expect_exact(PROMPT)
        child.sendline("SELECT count(*) AS c FROM big; SELECT 'a;b' AS s;")
        child.expect_exact(PROMPT)
        printed = output(child)
        assert single_node(table_dir, "SELECT count(*) AS c FROM t WHERE v > 390") in printed
        assert "| a;b |" in printed and "1 row(s)\n" in printed and " in 0." not in printed  # timing off

        child.sendline("\\d")
        child.expect_exact(PROMPT)
        assert "| datafusion | public | big   |\n| datafusion | public | t     |" in output(child)
        child.sendline("\\nope")
        child.expect_exact(PROMPT)
        assert "unknown command \\nope" in output(child)
        child.sendline("\\q")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    history = (tmp_path / ".datafusion_distributed_history").read_text()
    assert "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k ORDER BY k;\n" in history


def test_ctrl_c_cancels_the_query_or_clears_the_line_and_ctrl_d_leaves(tmp_path):
    with terminal(tmp_path, "sql") as child:
        child.expect_exact(PROMPT)
        child.sendline(LONG + ";")
        child.expect_exact("tasks 1 running")  # the progress line: the query runs on a worker
        child.sendintr()
        child.expect_exact("cancelled")
        child.expect_exact(PROMPT)
        child.sendline("SELECT 1 AS one")
        child.expect_exact(CONTINUATION)
        child.sendintr()  # drops the unfinished statement
        child.expect_exact(PROMPT)
        child.sendline("SELECT 42 AS answer;")  # alone: `SELECT 1 AS one` was dropped
        child.expect_exact(PROMPT)
        assert "| 42     |" in output(child) and "error" not in output(child)
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0


def test_ctrl_c_during_a_one_shot_query_says_cancelled(tmp_path):
    with terminal(tmp_path, "sql", LONG) as child:
        child.expect_exact("tasks 1 running")
        child.sendintr()
        child.expect_exact("cancelled")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 130


def test_the_shell_without_a_terminal(table_dir):
    """The same loop fed line by line: Ctrl-C (KeyboardInterrupt) at the prompt drops the lines
    typed so far, `\\explain` prints plans instead of results, end of input leaves."""
    typed = iter(
        ["SELECT 1 AS one", KeyboardInterrupt, f"{SUMS}", ";", "\\explain", f"{SUMS};", "\\explain off"]
    )

    def read_line(prompt: str) -> str:
        line = next(typed, EOFError)
        if isinstance(line, type):
            raise line()
        return line

    out, err = io.StringIO(), io.StringIO()
    with DistributedContext() as dctx:
        dctx.register_parquet("t", str(table_dir))
        assert Shell(SqlSession(dctx, ShowOptions(), out, err), read_line).run() == 0
    printed = out.getvalue()
    assert printed.count(single_node(table_dir, SUMS)) == 1 and "| one |" not in printed
    assert "Stage 0" in printed and "explain (plans instead of results) on" in err.getvalue()
    assert "error" not in err.getvalue()


def test_the_prompt_keeps_the_dashboard_up_between_statements(tmp_path, table_dir):
    with terminal(
        tmp_path, "sql", "--table", f"t={table_dir}/", "--no-progress", "--dashboard-port", "0"
    ) as child:
        child.expect(r"dashboard: (http://127\.0\.0\.1:\d+/)")
        url = child.match.group(1)
        child.expect_exact(PROMPT)
        for statement in (SUMS, "SELECT count(*) AS c FROM t"):
            child.sendline(statement + ";")
            child.expect_exact(PROMPT)
        with urllib.request.urlopen(url + "api/queries", timeout=WAIT) as answer:
            queries = json.load(answer)["queries"]
        assert [q["sql"] for q in queries] == ["SELECT count(*) AS c FROM t", SUMS]  # newest first
        assert {q["state"] for q in queries} == {"finished"}
        child.sendline("\\q")
        child.expect(pexpect.EOF)
    with pytest.raises(OSError):  # gone with the command
        urllib.request.urlopen(url, timeout=5)
