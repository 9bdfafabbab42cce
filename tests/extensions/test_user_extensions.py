"""User extensions run distributed: the example crate's node and codec (examples/extension_sample)
and the compiled aggregates of `datafusion-extra-functions`, on the embedded cluster and on
worker processes, each answer compared with single-node DataFusion on the same context."""

from __future__ import annotations

import importlib
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, ExtensionError, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.forced import forced_distribution
from tests.support.extensions import build_example_extension, install_extra_functions

SAMPLED = "SELECT g, count(*) AS c, sum(v) AS s FROM t GROUP BY g ORDER BY g"
CODEC = "extension_sample:SampleCodec"
EXTRA = "tests.support.extensions:install_extra_functions"
# the aggregates of datafusion-extra-functions 0.5.5, over groups with one mode and distinct
# keys; but min_by, which fails single-node in that release ("should not reach here")
EXTRA_SQL = (
    "SELECT g, mode(m) AS mode_m, skewness(x) AS skew, kurtosis(x) AS kurt, "
    "kurtosis_pop(x) AS kurt_pop, max_by(v, x) AS max_v FROM t GROUP BY g ORDER BY g"
)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The example extension's module, built from examples/extension_sample, importable here
    and by the worker processes the tests start."""
    folder = build_example_extension(tmp_path_factory.mktemp("extension_sample"))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
        yield importlib.import_module("extension_sample")
    sys.modules.pop("extension_sample", None)


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory):
    """Four Parquet files of 5000 rows: g in 0..4, v distinct, x a skewed float (distinct too, so
    that max_by has one answer), m with one mode per g."""
    folder = tmp_path_factory.mktemp("t")
    for i in range(4):
        v = list(range(i * 5000, (i + 1) * 5000))
        pq.write_table(
            pa.table({
                "g": [n % 5 for n in v],
                "v": v,
                "x": [float(n % 997) ** 1.5 + n * 1e-5 for n in v],  # skewed, and no two alike
                "m": [n % 5 if n % 3 else 100 + n % 7 for n in v],
            }),
            folder / f"part-{i}.parquet",
        )  # fmt: skip
    return str(folder)


def _sampling_context(sample, table_dir: str, one_in: int = 10) -> SessionContext:
    ctx = SessionContext()
    ctx.add_physical_optimizer_rule(sample.SampleScans(one_in))
    ctx.register_parquet("t", table_dir)
    return ctx


def _same_as_single_node(ctx: SessionContext, dctx: DistributedContext, sql: str) -> pa.Table:
    expected = ctx.sql(sql).to_arrow_table()
    df = dctx.sql(sql)
    plan = df.distributed_plan()
    assert plan.is_distributed and not plan.single_node, plan.single_node
    actual = df.to_arrow_table()
    assert_tables_equal(actual, expected, sql=sql)
    assert_ran_distributed(df)
    return actual


def _one_node_saying(ctx: SessionContext, dctx: DistributedContext, sql: str, *says: str) -> None:
    """`sql` runs on one node through `dctx`, with a note holding each of `says`, and answers
    as on `ctx`."""
    df = dctx.sql(sql)
    note = df.distributed_plan().single_node
    assert note and all(part in note for part in says), note
    assert_tables_equal(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), sql=sql)
    assert_ran_on_one_node(df)


def _split_stages_holding(dctx: DistributedContext, sql: str, node: str) -> list[int]:
    """The task counts of the stages whose plan holds `node`."""
    plan = dctx.sql(sql).distributed_plan()
    return [s.task_count for s in plan.stages if any(node in n.line for n in s.root.walk())]


def _unsampled(table_dir: str) -> pa.Table:
    ctx = SessionContext()
    ctx.register_parquet("t", table_dir)
    return ctx.sql(SAMPLED).to_arrow_table()


# -- the example node, its rule and its codec ------------------------------------------------------


def test_the_example_node_runs_in_every_task_of_a_split_stage_on_the_embedded_cluster(sample, table_dir):
    ctx = _sampling_context(sample, table_dir)
    with DistributedContext(ctx, extensions=[sample.SampleCodec()], **forced_distribution()) as dctx:
        assert max(_split_stages_holding(dctx, SAMPLED, "SampleExec")) >= 2
        answer = _same_as_single_node(ctx, dctx, SAMPLED)
    # the tasks sampled: the answer is single-node's sampled one, far from the whole table's
    whole = _unsampled(table_dir)
    assert sum(answer["c"].to_pylist()) < sum(whole["c"].to_pylist()) / 5


def test_the_example_node_runs_on_worker_processes_given_its_codec_by_name(sample, table_dir):
    ctx = _sampling_context(sample, table_dir, one_in=3)
    with (
        LocalCluster(2, share_spools=False, extensions=[CODEC]) as cluster,
        DistributedContext(ctx, workers=cluster, extensions=[CODEC], **forced_distribution()) as dctx,
    ):
        assert max(_split_stages_holding(dctx, SAMPLED, "SampleExec")) >= 2
        _same_as_single_node(ctx, dctx, SAMPLED)
        assert all(
            h["extensions"] == CODEC for h in (dctx.clients.get(u).health() for u in cluster.get_urls())
        )


def test_a_node_without_its_codec_runs_on_one_node_naming_it(sample, table_dir):
    ctx = _sampling_context(sample, table_dir)
    with DistributedContext(ctx, **forced_distribution()) as dctx:
        _one_node_saying(ctx, dctx, SAMPLED, "SampleExec", "extensions=")


def test_workers_started_without_an_extension_the_context_names_run_no_task(sample, table_dir):
    ctx = _sampling_context(sample, table_dir)
    with (
        LocalCluster(2) as cluster,
        DistributedContext(
            ctx,
            workers=cluster.get_urls(),
            extensions=[CODEC],
            **forced_distribution(auth_token=cluster.auth_token),
        ) as dctx,
    ):
        _one_node_saying(
            ctx, dctx, SAMPLED, f"was started without the extension {CODEC!r}", f"--extension {CODEC}"
        )


# -- third-party compiled functions: datafusion-extra-functions -----------------------------------


def _extra_context(table_dir: str) -> SessionContext:
    ctx = SessionContext()
    install_extra_functions(ctx)
    ctx.register_parquet("t", table_dir)
    return ctx


def test_third_party_compiled_aggregates_run_distributed_through_an_installer(table_dir):
    ctx = _extra_context(table_dir)
    with DistributedContext(ctx, extensions=[install_extra_functions], **forced_distribution()) as dctx:
        _same_as_single_node(ctx, dctx, EXTRA_SQL)


def test_third_party_compiled_aggregates_run_on_worker_processes(table_dir):
    ctx = _extra_context(table_dir)
    with (
        LocalCluster(2, share_spools=False, extensions=[EXTRA]) as cluster,
        DistributedContext(ctx, workers=cluster, extensions=[EXTRA], **forced_distribution()) as dctx,
    ):
        _same_as_single_node(ctx, dctx, EXTRA_SQL)


def test_third_party_aggregates_without_the_installer_run_on_one_node_saying_how(table_dir):
    ctx = _extra_context(table_dir)
    with DistributedContext(ctx, **forced_distribution()) as dctx:
        _one_node_saying(ctx, dctx, EXTRA_SQL, "is registered on this context only", "--extension")


# -- bad extensions: clear errors naming them ----------------------------------------------------


@pytest.mark.parametrize(
    ("extension", "says"),
    [
        ("no_colon", "expected 'module:attribute'"),
        ("no_such_module_here:f", "module 'no_such_module_here' cannot be imported"),
        ("tests.support.extensions:missing", "has no 'missing'"),
        (42, "is neither a physical extension codec, an extension bundle nor an installer"),
        (lambda ctx: "not a context", "an installer returns None or a SessionContext, not str"),
        (lambda ctx: 1 / 0, "failed to install: division by zero"),
    ],
)
def test_a_bad_extension_is_refused_when_the_context_is_made(extension, says):
    with pytest.raises(ExtensionError, match=says.replace("(", r"\(").replace(")", r"\)")):
        DistributedContext(SessionContext(), extensions=[extension])


def test_worker_processes_take_extensions_by_name_only():
    with pytest.raises(ExtensionError, match="an object cannot reach another process"):
        LocalCluster(1, extensions=[install_extra_functions])  # type: ignore[list-item]


def test_a_worker_with_a_bad_extension_does_not_start(tmp_path):
    import subprocess

    spool = tmp_path / "spool"
    done = subprocess.run(
        [sys.executable, "-m", "datafusion_distributed", "worker", "--insecure-no-auth", "--port", "0",
         "--spool-dir", str(spool), "--extension", "no_such_module_here:f"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert (
        "--extension: extension 'no_such_module_here:f': module 'no_such_module_here' cannot" in done.stderr
    )
    assert not spool.exists()


def test_a_codec_installed_on_the_context_only_keeps_its_nodes_on_one_node(sample, table_dir):
    ctx = _sampling_context(sample, table_dir).with_physical_extension_codec(sample.SampleCodec())
    with DistributedContext(ctx, **forced_distribution()) as dctx:
        _one_node_saying(
            ctx, dctx, SAMPLED, f"the extension codec {sample.CODEC_ID!r}, installed on this context only"
        )
