from __future__ import annotations

import datetime
import decimal
import math

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from datafusion_distributed.test_utils.compare import (
    assert_tables_equal,
    is_ordered_query,
    order_by_keys,
    to_arrow_table,
)

D = decimal.Decimal

# the comparer's own tests: its answers come from no query run
pytestmark = pytest.mark.not_a_distributed_run


def table(**columns) -> pa.Table:
    return pa.table(columns)


# --------------------------------------------------------------------------------------
# Reading ORDER BY from SQL
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, ordered",
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("select a from t order  by a desc limit 3;", True),
        ("SELECT a FROM t", False),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a) s", False),
        ("WITH s AS (SELECT a FROM t ORDER BY a LIMIT 5) SELECT a FROM s", False),
        ("SELECT a, row_number() OVER (ORDER BY a) FROM t", False),
        ("SELECT a FROM t WHERE b = 'x ORDER BY a'", False),
        ("SELECT a FROM t -- ORDER BY a\n", False),
        ("SELECT a FROM t /* ORDER BY a */", False),
        ('SELECT "order by" FROM t', False),
        ("SELECT a FROM t UNION ALL SELECT a FROM u ORDER BY 1", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a) s ORDER BY a DESC", True),
    ],
)
def test_is_ordered_query(sql, ordered):
    assert is_ordered_query(sql) is ordered


@pytest.mark.parametrize(
    "sql, keys",
    [
        ("SELECT a, b FROM t ORDER BY a, b DESC", ["a", "b"]),
        ("SELECT a, b FROM t ORDER BY A ASC NULLS FIRST, t.B DESC NULLS LAST LIMIT 10", ["a", "b"]),
        ('SELECT "Mixed" FROM t ORDER BY "Mixed"', ["Mixed"]),
        ("SELECT a, b FROM t ORDER BY 2, 1", [2, 1]),
        ("SELECT a FROM t ORDER BY a + 1", None),
        ("SELECT a FROM t ORDER BY sum(b)", None),
        ("SELECT a FROM t ORDER BY a, lower(b)", None),
        ("SELECT a FROM t", None),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a) s", None),
    ],
)
def test_order_by_keys(sql, keys):
    assert order_by_keys(sql) == keys


# --------------------------------------------------------------------------------------
# Content
# --------------------------------------------------------------------------------------


def test_equal_tables_pass():
    t = table(a=[1, 2, 3], b=["x", "y", None])
    assert_tables_equal(t, t)


def test_unordered_ignores_row_order():
    assert_tables_equal(table(a=[3, 1, 2], b=["c", "a", "b"]), table(a=[1, 2, 3], b=["a", "b", "c"]))


def test_unordered_keeps_duplicates():
    with pytest.raises(AssertionError, match="rows differ"):
        assert_tables_equal(table(a=[1, 1, 2]), table(a=[1, 2, 2]))


def test_row_count_mismatch_is_reported():
    with pytest.raises(AssertionError, match=r"row count differs: actual has 2 rows, expected 3") as info:
        assert_tables_equal(table(a=[1, 2]), table(a=[1, 2, 3]))
    assert "rows only in expected (1)" in str(info.value)
    assert "{a: 3}" in str(info.value)


def test_value_mismatch_names_column_and_values():
    with pytest.raises(AssertionError) as info:
        assert_tables_equal(table(k=[1, 2], v=["x", "y"]), table(k=[1, 2], v=["x", "z"]))
    message = str(info.value)
    assert "column 'v'" in message
    assert "actual 'y', expected 'z'" in message
    assert "actual row:   {k: 2, v: 'y'}" in message


def test_column_names_must_match():
    with pytest.raises(AssertionError, match="column names differ"):
        assert_tables_equal(table(a=[1]), table(b=[1]))
    with pytest.raises(AssertionError, match="column names differ"):
        assert_tables_equal(table(a=[1], b=[2]), table(b=[2], a=[1]))


def test_incomparable_types_fail():
    with pytest.raises(AssertionError, match="incomparable types"):
        assert_tables_equal(table(a=["1"]), table(a=[1]))


def test_nulls_equal_nulls_and_nothing_else():
    assert_tables_equal(table(a=[None, 1]), table(a=[1, None]))
    with pytest.raises(AssertionError):
        assert_tables_equal(table(a=[None, 1]), table(a=[0, 1]))
    with pytest.raises(AssertionError):
        assert_tables_equal(table(a=pa.array([None], pa.float64())), table(a=[0.0]))


def test_empty_tables():
    empty = pa.table({"a": pa.array([], pa.int64())})
    assert_tables_equal(empty, empty)
    with pytest.raises(AssertionError, match="row count"):
        assert_tables_equal(empty, table(a=[1]))


# --------------------------------------------------------------------------------------
# Numbers and loose types
# --------------------------------------------------------------------------------------


def test_integer_widths_compare_by_value():
    assert_tables_equal(
        table(a=pa.array([1, 2], pa.int32())),
        table(a=pa.array([1, 2], pa.int64())),
    )
    with pytest.raises(AssertionError):
        assert_tables_equal(table(a=pa.array([1], pa.int32())), table(a=pa.array([2], pa.int64())))


def test_decimals_with_different_precision_and_scale_compare_exactly():
    actual = table(a=pa.array([D("1.50"), D("2.00")], pa.decimal128(15, 2)))
    expected = table(a=pa.array([D("1.5000"), D("2.0000")], pa.decimal128(38, 4)))
    assert_tables_equal(actual, expected)
    off_by_a_cent = table(a=pa.array([D("1.5100"), D("2.0000")], pa.decimal128(38, 4)))
    with pytest.raises(AssertionError, match="actual 1.50, expected 1.5100"):
        assert_tables_equal(actual, off_by_a_cent)


def test_decimal_equals_integer():
    assert_tables_equal(table(a=[5]), table(a=pa.array([D("5")], pa.decimal128(38, 0))))


def test_floats_within_relative_tolerance():
    assert_tables_equal(table(a=[1e9, 1.0]), table(a=[1e9 + 0.5, 1.0 + 1e-8]))
    with pytest.raises(AssertionError, match="column 'a'"):
        assert_tables_equal(table(a=[1.0]), table(a=[1.0001]))


def test_custom_tolerance():
    assert_tables_equal(table(a=[1.0]), table(a=[1.0001]), rel_tol=1e-3)


def test_floats_near_zero_use_absolute_tolerance():
    assert_tables_equal(table(a=[0.0]), table(a=[1e-12]))
    with pytest.raises(AssertionError):
        assert_tables_equal(table(a=[0.0]), table(a=[1e-3]))


def test_nan_equals_nan():
    assert_tables_equal(table(a=[math.nan, 1.0]), table(a=[1.0, math.nan]))
    with pytest.raises(AssertionError):
        assert_tables_equal(table(a=[math.nan]), table(a=[1.0]))


def test_decimal_against_float_allows_the_decimals_last_digit():
    # e.g. avg of a decimal: DECIMAL(19,6) cut to six places in one engine, a double in another
    actual = table(a=pa.array([D("0.050081")], pa.decimal128(19, 6)))
    assert_tables_equal(actual, table(a=[0.05008133906964238]))
    with pytest.raises(AssertionError):
        assert_tables_equal(actual, table(a=[0.0501]))


def test_string_flavours_and_dictionaries_compare_by_value():
    values = ["a", "b", None]
    assert_tables_equal(
        table(s=pa.array(values, pa.string_view())),
        table(s=pa.array(values, pa.large_string())),
    )
    assert_tables_equal(
        table(s=pa.array(values).dictionary_encode()),
        table(s=pa.array(values, pa.string())),
    )


def test_dates_and_timestamps():
    d = [datetime.date(1995, 3, 15), datetime.date(1998, 9, 2)]
    assert_tables_equal(table(d=pa.array(d, pa.date32())), table(d=pa.array(d, pa.date64())))
    ts = [datetime.datetime(2024, 1, 1, 12, 0, 1)]
    assert_tables_equal(
        table(t=pa.array(ts, pa.timestamp("us"))),
        table(t=pa.array(ts, pa.timestamp("ms"))),
    )
    with pytest.raises(AssertionError):
        assert_tables_equal(
            table(d=pa.array(d[:1], pa.date32())), table(d=pa.array([datetime.date(1995, 3, 16)]))
        )


def test_nested_values():
    assert_tables_equal(table(l=[[1.0, 2.0], None]), table(l=[None, [1.0, 2.0 + 1e-9]]))
    with pytest.raises(AssertionError):
        assert_tables_equal(table(l=[[1, 2]]), table(l=[[1, 3]]))


# --------------------------------------------------------------------------------------
# Ordered results
# --------------------------------------------------------------------------------------


def test_ordered_from_sql_rejects_wrong_order():
    sql = "SELECT k, v FROM t ORDER BY k"
    expected = table(k=[1, 2, 3], v=["a", "b", "c"])
    assert_tables_equal(expected, expected, sql=sql)
    with pytest.raises(AssertionError, match=r"row order differs at row 0 on ORDER BY keys \['k'\]"):
        assert_tables_equal(table(k=[2, 1, 3], v=["b", "a", "c"]), expected, sql=sql)


def test_unordered_sql_accepts_any_order():
    assert_tables_equal(
        table(k=[2, 1], v=["b", "a"]), table(k=[1, 2], v=["a", "b"]), sql="SELECT k, v FROM t"
    )


def test_ordered_allows_ties_in_any_order():
    sql = "SELECT k, v FROM t ORDER BY k DESC"
    expected = table(k=[2, 1, 1], v=["z", "a", "b"])
    assert_tables_equal(table(k=[2, 1, 1], v=["z", "b", "a"]), expected, sql=sql)
    with pytest.raises(AssertionError, match="row order differs"):
        assert_tables_equal(table(k=[1, 2, 1], v=["b", "z", "a"]), expected, sql=sql)


def test_ordered_by_position_and_explicit_keys():
    expected = table(k=[1, 1, 2], v=["a", "b", "c"])
    tied = table(k=[1, 1, 2], v=["b", "a", "c"])
    assert_tables_equal(tied, expected, sql="SELECT k, v FROM t ORDER BY 1")
    assert_tables_equal(tied, expected, ordered=True, order_by=["k"])
    with pytest.raises(AssertionError, match="row order differs"):
        assert_tables_equal(tied, expected, ordered=True, order_by=["v"])
    with pytest.raises(ValueError, match="not in"):
        assert_tables_equal(tied, expected, ordered=True, order_by=["missing"])


def test_ordered_without_keys_compares_rows_in_order():
    expected = table(k=[1, 1], v=["a", "b"])
    assert_tables_equal(expected, expected, ordered=True)
    with pytest.raises(AssertionError, match=r"rows differ at row 0 \(in order\)"):
        assert_tables_equal(table(k=[1, 1], v=["b", "a"]), expected, ordered=True)


def test_ordered_by_expression_compares_content_only():
    # The key cannot be checked without evaluating it, so only the content is compared.
    sql = "SELECT k FROM t ORDER BY k % 2, k"
    assert_tables_equal(table(k=[1, 2, 3]), table(k=[2, 1, 3]), sql=sql)
    with pytest.raises(AssertionError, match="rows differ"):
        assert_tables_equal(table(k=[1, 2, 4]), table(k=[2, 1, 3]), sql=sql)


def test_ordered_false_overrides_sql():
    assert_tables_equal(table(k=[2, 1]), table(k=[1, 2]), sql="SELECT k FROM t ORDER BY k", ordered=False)


def test_ordered_float_keys_use_tolerance():
    sql = "SELECT revenue FROM t ORDER BY revenue DESC"
    assert_tables_equal(table(revenue=[3.0, 2.0 + 1e-10]), table(revenue=[3.0, 2.0]), sql=sql)


# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


def test_accepts_batches_and_data_frames():
    t = table(a=[1, 2], b=["x", "y"])
    assert_tables_equal(t.to_batches()[0], t)
    assert_tables_equal(t.to_batches(), t)
    assert_tables_equal(pd.DataFrame({"a": [2, 1], "b": ["y", "x"]}), t)
    assert to_arrow_table(t) is t
    with pytest.raises(TypeError):
        to_arrow_table(object())


def test_accepts_datafusion_and_duckdb_results():
    import datafusion
    import duckdb

    expected = table(a=[1, 2])
    ctx = datafusion.SessionContext()
    assert_tables_equal(ctx.sql("SELECT * FROM (VALUES (2), (1)) AS v(a)"), expected)
    con = duckdb.connect()
    assert_tables_equal(con.sql("SELECT * FROM (VALUES (2), (1)) AS v(a)"), expected)


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------

rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-5, 5)),
        st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=False, width=32)),
        st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
    ),
    max_size=20,
)


def _table_from_rows(values) -> pa.Table:
    return pa.table(
        {
            "i": pa.array([r[0] for r in values], pa.int64()),
            "f": pa.array([r[1] for r in values], pa.float64()),
            "s": pa.array([r[2] for r in values], pa.string()),
        }
    )


@given(rows, st.randoms())
def test_any_permutation_is_equal_when_unordered(values, random):
    shuffled = list(values)
    random.shuffle(shuffled)
    assert_tables_equal(_table_from_rows(shuffled), _table_from_rows(values))


@given(rows.filter(bool), st.data())
def test_changing_one_integer_is_caught(values, data):
    index = data.draw(st.integers(0, len(values) - 1))
    changed = list(values)
    i, f, s = changed[index]
    changed[index] = (100 if i is None else i + 100, f, s)
    with pytest.raises(AssertionError):
        assert_tables_equal(_table_from_rows(changed), _table_from_rows(values))
