"""The command line (workers, the `sql` shell) imports DataFusion without pandas, and pyarrow still
converts pandas objects exactly as usual once a user's code imports pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from datafusion import SessionContext, udf

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.tpch import register_tpch

# What pyarrow makes of pandas objects, printed by a process: a categorical Series is a
# dictionary array only where pyarrow knows pandas is there.
CONVERSIONS = """
import pandas as pd
import pyarrow as pa
print(pa.array(pd.Series(pd.Categorical(["a", "b", "a"]))).type)
print(pa.array(pd.Series(pd.to_datetime(["2020-01-01"]).tz_localize("UTC"))).type)
print(pa.Table.from_pandas(pd.DataFrame({"x": pd.Categorical(["a"])})).schema.field("x").type)
print(type(pd.__loader__).__name__, type(pd.__spec__.loader).__name__)
"""


def run_python(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_command_line_imports_datafusion_without_pandas():
    lines = run_python(
        "import sys, datafusion_distributed.cli\nprint('datafusion' in sys.modules, 'pandas' in sys.modules)"
    )
    assert lines == ["True False"]


def test_pyarrow_converts_pandas_as_usual_once_pandas_is_imported():
    usual = run_python("import datafusion\n" + CONVERSIONS)
    after_lean_import = run_python("import datafusion_distributed.cli\n" + CONVERSIONS)
    assert after_lean_import == usual
    assert usual[0].startswith("dictionary<")  # the difference a stale pyarrow would make


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads a process's mapped files")
def test_a_worker_imports_pandas_only_for_a_udf_that_needs_it(tpch_sf001):
    def pyarrow_type_of_a_categorical(values: pa.Array) -> pa.Array:
        """Imports pandas when it runs, as a user's UDF may (defined here, so that it travels
        by value): the type pyarrow gives a categorical Series, as a string."""
        import pandas as pd

        made = pa.array(pd.Series(pd.Categorical(values.to_pylist())))
        return pa.array([str(made.type)] * len(values))

    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    ctx.register_udf(
        udf(pyarrow_type_of_a_categorical, [pa.string()], pa.string(), "stable", name="categorical_type")
    )
    sql = "SELECT c_custkey, categorical_type(c_mktsegment) AS t FROM customer ORDER BY c_custkey"
    expected = ctx.sql(sql).to_arrow_table()
    assert expected.column("t")[0].as_py().startswith("dictionary<")

    def pandas_loaded(pid: int) -> bool:
        return "/pandas/" in Path(f"/proc/{pid}/maps").read_text()

    config = DistributedConfig(bytes_per_partition=1)  # every file a task: the UDF runs on workers
    with LocalCluster(2) as cluster, DistributedContext(ctx, workers=cluster, config=config) as dctx:
        workers = [process.pid for process in cluster.processes]
        assert not any(pandas_loaded(pid) for pid in workers)
        assert_tables_equal(dctx.sql(sql).to_arrow_table(), expected, sql=sql)
        assert_ran_distributed(dctx)
        assert any(pandas_loaded(pid) for pid in workers)


def test_without_pandas_installed_nothing_is_left_waiting_for_it():
    lines = run_python(
        "import sys\n"
        "class NotInstalled:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pandas':\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, NotInstalled())\n"
        "finders = list(sys.meta_path)\n"
        "import datafusion_distributed.cli\n"
        "print(sys.meta_path == finders, 'datafusion' in sys.modules)"
    )
    assert lines == ["True True"]
