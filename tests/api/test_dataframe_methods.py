"""The public methods of DistributedContext and DistributedDataFrame: documented, typed, with
DataFusion's own parameters, forwarding every argument, and giving DataFusion's answers."""

from __future__ import annotations

import inspect
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import DataFrame, SessionContext, col, lit
from datafusion import functions as f

from datafusion_distributed import DistributedContext, DistributedDataFrame
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.forced import forced_distribution

# DataFrame transformations: on a DistributedDataFrame they return one.
TRANSFORMATIONS = {
    "aggregate", "alias", "cast", "describe", "distinct", "distinct_on", "drop", "except_all",
    "fill_nan", "fill_null", "filter", "head", "intersect", "join", "join_on", "limit",
    "repartition", "repartition_by_hash", "select", "select_exprs", "sort", "sort_by", "tail",
    "transform", "union", "union_by_name", "union_distinct", "unnest_columns", "window",
    "with_column", "with_column_renamed", "with_columns",
}  # fmt: skip

# SessionContext calls that make a DataFrame: on a DistributedContext they make a DistributedDataFrame.
FACTORIES = {
    "from_pydict",
    "from_pylist",
    "from_arrow",
    "from_pandas",
    "from_polars",
    "read_arrow",
    "read_avro",
}

# SessionContext calls that a DistributedContext passes to the context it wraps.
PASSTHROUGH = {
    "register_parquet", "register_csv", "register_json", "register_arrow", "register_avro",
    "register_record_batches", "register_table", "register_view", "register_dataset",
    "register_listing_table", "register_batch", "register_udf",
    "register_udaf", "register_udwf", "register_udtf", "deregister_table", "table_exist",
    "catalog", "catalog_names", "session_id",
}  # fmt: skip

# Every other attribute of DataFusion's DataFrame, by what a DistributedDataFrame does with it.
METADATA = {  # runs nothing: DataFusion's own answer
    "schema", "logical_plan", "optimized_logical_plan", "execution_plan", "into_view",
    "parse_sql_expr", "column", "col", "find_qualified_columns",
}  # fmt: skip
RESULTS = {  # runs the query distributed
    "collect", "collect_column", "collect_partitioned", "count", "execute_stream",
    "execute_stream_partitioned", "explain", "to_arrow_table", "to_pandas", "to_polars",
    "to_pydict", "to_pylist", "cache", "__iter__", "__aiter__", "__arrow_c_stream__",
}  # fmt: skip
DISPLAY = {"show", "_repr_html_", "default_str_repr"}  # how a result is shown (its own work)
WRITES = {"write_parquet_with_options"}  # refused
# a COPY (or, for write_table, an INSERT) split over tasks
DISTRIBUTED_WRITES = {"write_csv", "write_json", "write_parquet", "write_table"}
OTHER_TRANSFORMATIONS = {"__getitem__"}
NOT_METHODS = {"__dict__", "__module__", "__weakref__"}

WRAPPED = [(DistributedDataFrame, DataFrame, name) for name in sorted(TRANSFORMATIONS)] + [
    (DistributedContext, SessionContext, name)
    for name in sorted(FACTORIES | PASSTHROUGH | {"read_parquet", "read_csv", "read_json"})
]


def public_methods(cls):
    for name, member in vars(cls).items():
        if isinstance(member, property):
            yield name, member.fget
        elif callable(member) and (not name.startswith("_") or name == "__init__"):
            yield name, member


@pytest.mark.parametrize("cls", [DistributedContext, DistributedDataFrame])
def test_public_methods_have_docstrings_and_type_hints(cls):
    for name, method in public_methods(cls):
        assert name == "__init__" or inspect.getdoc(method), f"{cls.__name__}.{name} has no docstring"
        signature = inspect.signature(method)
        unhinted = [p.name for p in list(signature.parameters.values())[1:] if p.annotation is p.empty]
        assert not unhinted, f"{cls.__name__}.{name}: no type hint for {unhinted}"
        assert signature.return_annotation is not signature.empty, f"{cls.__name__}.{name}: no return type"


# takes DataFusion's parameters, but records the store too (an S3Store: see test_object_stores.py)
OWN_WITH_DATAFUSIONS_PARAMETERS = [(DistributedContext, SessionContext, "register_object_store")]


@pytest.mark.parametrize(("cls", "datafusion_cls", "name"), WRAPPED + OWN_WITH_DATAFUSIONS_PARAMETERS)
def test_wrapped_methods_take_datafusions_parameters(cls, datafusion_cls, name):
    assert name in vars(cls), f"{cls.__name__}.{name} is not written out"

    def shape(method):
        return [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()][1:]

    assert shape(getattr(cls, name)) == shape(getattr(datafusion_cls, name))


def sample_call(method, wrap_frames):
    """Arguments for `method` (DataFusion's): a distinct object for every parameter. Where
    `wrap_frames`, DataFrame arguments are given as DistributedDataFrames; returns (what to
    pass, what DataFusion should receive)."""
    args, kwargs, expected_args, expected_kwargs = [], {}, [], {}
    for p in list(inspect.signature(method).parameters.values())[1:]:
        value = sent = object()
        if wrap_frames and p.name in ("other", "right"):
            value = sent = mock.create_autospec(DataFrame, instance=True)
            value = DistributedDataFrame(None, sent)
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL):
            args.append(value)
            expected_args.append(sent)
        elif p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = value
            expected_kwargs[p.name] = sent
        else:
            kwargs["extra"] = expected_kwargs["extra"] = value
    return (args, kwargs), (expected_args, expected_kwargs)


def bound(method, args, kwargs):
    call = inspect.signature(method).bind(None, *args, **kwargs)
    call.apply_defaults()
    return call.arguments


@pytest.mark.parametrize(("cls", "datafusion_cls", "name"), WRAPPED)
def test_wrapped_methods_forward_every_argument(cls, datafusion_cls, name):
    wrapped = mock.create_autospec(datafusion_cls, instance=True)
    if cls is DistributedContext:
        target = DistributedContext(wrapped, workers=["grpc://127.0.0.1:1"])
    else:
        target = DistributedDataFrame(None, wrapped)
    (args, kwargs), (expected_args, expected_kwargs) = sample_call(getattr(datafusion_cls, name), True)

    result = getattr(target, name)(*args, **kwargs)

    called = getattr(wrapped, name).call_args
    datafusion_method = getattr(datafusion_cls, name)
    assert bound(datafusion_method, called.args, called.kwargs) == bound(
        datafusion_method, expected_args, expected_kwargs
    )
    if name in PASSTHROUGH:
        assert result is getattr(wrapped, name).return_value
    else:
        assert isinstance(result, DistributedDataFrame)


@pytest.fixture(scope="module")
def dctx():
    with DistributedContext() as d:
        yield d


def transformation_calls(df, other):
    """One call of each transformation, on `df` (with `other` where it takes a second frame)."""
    return {
        "aggregate": lambda: df.aggregate([col("b")], [f.sum(col("a")).alias("s")]),
        "alias": lambda: df.alias("renamed"),
        "cast": lambda: df.cast({"a": pa.float64()}),
        "describe": lambda: df.describe(),
        "distinct": lambda: df.distinct(),
        "distinct_on": lambda: df.distinct_on(
            [col("b")], [col("a"), col("b")], [col("b").sort(), col("a").sort()]
        ),
        "drop": lambda: df.drop("b"),
        "except_all": lambda: df.except_all(other),
        "fill_nan": lambda: df.fill_nan(0.0),
        "fill_null": lambda: df.fill_null(0),
        "filter": lambda: df.filter(col("a") > lit(1)),
        "head": lambda: df.sort(col("a").sort()).head(2),  # sorted: which rows is decided
        "intersect": lambda: df.intersect(other),
        "join": lambda: df.join(other.select("a"), on="a"),
        "join_on": lambda: df.join_on(other.select(col("a").alias("a2")), col("a") == col("a2")),
        "limit": lambda: df.sort(col("a").sort()).limit(2, 1),
        "repartition": lambda: df.repartition(2),
        "repartition_by_hash": lambda: df.repartition_by_hash(col("a"), num=2),
        "select": lambda: df.select("a"),
        "select_exprs": lambda: df.select_exprs("a + 1 AS a1"),
        "sort": lambda: df.sort(col("a").sort(ascending=False)),
        "sort_by": lambda: df.sort_by(col("b"), col("a")),
        "tail": lambda: df.sort(col("a").sort()).tail(2),
        "transform": lambda: df.transform(lambda d, least: d.filter(col("a") >= lit(least)), 2),
        "union": lambda: df.union(other),
        "union_by_name": lambda: df.union_by_name(other.select("b", "a")),
        "union_distinct": lambda: df.union_distinct(other),
        "unnest_columns": lambda: df.with_column("l", f.make_array(col("a"), col("a"))).unnest_columns("l"),
        "window": lambda: df.window(f.row_number(order_by=[col("a")]).alias("n")),
        "with_column": lambda: df.with_column("c", col("a") + lit(1)),
        "with_column_renamed": lambda: df.with_column_renamed("a", "z"),
        "with_columns": lambda: df.with_columns((col("a") * lit(2)).alias("d"), e=col("b")),
    }


@pytest.fixture(scope="module")
def split_frames(tmp_path_factory):
    """A context that splits every stage, and two frames over two Parquet files each."""
    folder = tmp_path_factory.mktemp("frames")
    tables = {
        "df": pa.table({"a": [1, 2, 3, 4], "b": ["x", "y", "x", "z"]}),
        "other": pa.table({"a": [3, 4, 5], "b": ["x", "z", "w"]}),
    }
    for name, table in tables.items():
        (folder / name).mkdir()
        pq.write_table(table.slice(0, 2), folder / name / "0.parquet")
        pq.write_table(table.slice(2), folder / name / "1.parquet")
    with DistributedContext(SessionContext(), **forced_distribution()) as forced:
        for name in tables:
            forced.register_parquet(name, str(folder / name))
        yield forced, forced.table("df"), forced.table("other")


@pytest.mark.parametrize("name", sorted(TRANSFORMATIONS))
@pytest.mark.filterwarnings("ignore:union_distinct.. is deprecated:DeprecationWarning")
def test_transformations_stay_distributed_and_answer_as_datafusion(split_frames, name):
    forced, df, other = split_frames
    distributed = transformation_calls(df, other)[name]()
    assert isinstance(distributed, DistributedDataFrame)
    expected = transformation_calls(df.df, other.df)[name]()
    assert_tables_equal(distributed.to_arrow_table(), expected.to_arrow_table())
    if name == "describe":  # DataFusion computes it when called, in the wrapped context
        assert_ran_on_one_node(distributed)
    else:
        assert_ran_distributed(distributed)


def test_context_factories_and_passthroughs_use_the_wrapped_context(dctx):
    table = pa.table({"a": [1, 2, 3]})
    assert dctx.from_pylist([{"a": 1}, {"a": 2}]).count() == 2
    assert dctx.from_arrow(table, name="from_arrow_t").to_pydict() == {"a": [1, 2, 3]}
    assert dctx.from_pandas(table.to_pandas()).count() == 3
    assert dctx.from_polars(dctx.from_arrow(table).to_polars()).count() == 3
    dctx.register_record_batches("batches_t", [table.to_batches()])
    assert dctx.table_exist("batches_t") and dctx.ctx.table_exist("batches_t")
    assert dctx.sql("SELECT sum(a) AS s FROM batches_t").to_pylist() == [{"s": 6}]
    dctx.deregister_table("batches_t")
    assert not dctx.ctx.table_exist("batches_t")
    assert dctx.session_id() == dctx.ctx.session_id()
    assert dctx.catalog_names() == dctx.ctx.catalog_names()
    assert dctx.catalog().names() == dctx.ctx.catalog().names()


def test_every_datafusion_dataframe_method_is_classified():
    """A DataFusion release that adds a DataFrame method fails here until it is sorted: a
    transformation, metadata, a result, display, or a write."""
    classified = (
        TRANSFORMATIONS
        | OTHER_TRANSFORMATIONS
        | METADATA
        | RESULTS
        | DISPLAY
        | WRITES
        | DISTRIBUTED_WRITES
        | NOT_METHODS
    )
    datafusion_names = set(dir(DataFrame)) - set(dir(object))
    assert datafusion_names - classified == set(), "DataFusion DataFrame methods not classified"
    assert classified - datafusion_names == set(), "classified names DataFusion no longer has"
    groups = [
        TRANSFORMATIONS | OTHER_TRANSFORMATIONS,
        METADATA,
        RESULTS,
        DISPLAY,
        WRITES,
        DISTRIBUTED_WRITES,
        NOT_METHODS,
    ]
    assert sum(len(g) for g in groups) == len(classified), "a name is in two classes"


@pytest.mark.parametrize(
    "name", sorted(TRANSFORMATIONS | OTHER_TRANSFORMATIONS | METADATA | RESULTS | DISTRIBUTED_WRITES)
)
def test_non_write_methods_are_written_out(name):
    assert name in vars(DistributedDataFrame), f"DistributedDataFrame.{name} is missing"


@pytest.mark.parametrize("name", sorted(WRITES))
def test_writes_are_refused_with_the_way_to_run_them_on_one_node(dctx, name):
    with pytest.raises(
        AttributeError, match=rf"DistributedDataFrame.{name} is not available: use .df.{name}"
    ):
        getattr(dctx.from_pydict({"a": [1]}), name)


def test_other_dataframe_methods_are_refused_by_name(dctx):
    df = dctx.from_pydict({"a": [1]})
    with pytest.raises(
        AttributeError,
        match=r"DistributedDataFrame.write_parquet_with_options is not available: use .df.write_parquet_with_options",
    ):
        df.write_parquet_with_options  # noqa: B018
    with pytest.raises(AttributeError, match="DistributedDataFrame has no attribute 'no_such_method'"):
        df.no_such_method  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_method"):
        dctx.no_such_method  # noqa: B018
