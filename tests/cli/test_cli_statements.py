"""Splitting SQL text into statements: a `;` inside a string, a quoted name or a comment ends
nothing; line numbers point at each statement's first line of code."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from datafusion_distributed.cli.statements import split_statements


def sqls(text: str) -> list[str]:
    return [s.sql for s in split_statements(text).all_statements()]


def test_semicolons_inside_strings_names_and_comments_end_nothing():
    text = """SELECT 'a;b', "c;d" FROM t; -- one; two
SELECT 'it''s; fine' /* x; /* nested; */ still; */ AS s;
SELECT E'\\'; still a string' AS e; SELECT $$ a; b $$, $tag$ ; $$ ; $tag$ AS d"""
    assert sqls(text) == [
        """SELECT 'a;b', "c;d" FROM t""",
        "SELECT 'it''s; fine' /* x; /* nested; */ still; */ AS s",
        "SELECT E'\\'; still a string' AS e",
        "SELECT $$ a; b $$, $tag$ ; $$ ; $tag$ AS d",
    ]


def test_a_parameter_and_a_name_with_dollars_are_not_dollar_quotes():
    assert sqls("SELECT $1; SELECT a$b$ FROM t; SELECT 2") == ["SELECT $1", "SELECT a$b$ FROM t", "SELECT 2"]


def test_comments_and_blanks_alone_are_no_statement():
    assert sqls("-- only a comment\n;  ;\n/* and ; another */ ;\n") == []
    assert split_statements("SELECT 1; -- the end\n").rest_is_empty


def test_line_numbers_point_at_the_first_line_of_code():
    split = split_statements("-- header\n\nSELECT 1;\n/* c */ SELECT\n  2;\n\nSELEC 3")
    assert [(s.sql, s.line) for s in split.all_statements()] == [
        ("SELECT 1", 3),
        ("SELECT\n  2", 4),
        ("SELEC 3", 7),
    ]


def test_an_unfinished_statement_is_the_rest():
    for unfinished in ["SELECT 1", "SELECT 'a;", 'SELECT "a;', "SELECT /* ;", "SELECT $$ ;"]:
        split = split_statements(f"SELECT 0; {unfinished}")
        assert [s.sql for s in split.statements] == ["SELECT 0"]
        assert split.rest.sql == unfinished


# Pieces of statements, some holding a `;` that must not end anything.
PIECES = st.sampled_from(
    ["SELECT", "1", "a", "'x;y'", "'it''s'", '"n;m"', "/* ; */", "$$;$$", "E'\\';'", "-- c;\n", "\n", "+"]
)


@given(st.lists(st.lists(PIECES, min_size=1, max_size=6).map(" ".join), min_size=1, max_size=5))
def test_statements_joined_by_semicolons_split_back(statements):
    def code(text):  # what is left without blanks and comments
        return "".join(text.replace("/* ; */", "").replace("-- c;", "").split())

    text = ";".join(statements) + ";"
    expected = [s for s in statements if code(s)]
    assert [code(s) for s in sqls(text)] == [code(s) for s in expected]
