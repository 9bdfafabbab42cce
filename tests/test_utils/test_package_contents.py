"""The package ships what users need and nothing that only the repository needs.

test_utils is in the wheel for users' own tests (TPC-H data and queries, result comparison,
the in-process stage runner). The sqllogictest runner lives in devtools/, and code needing
the development extra only for the tests (the local S3 server, certificates) in
tests/support/; the 22 TPC-H queries are package data, read through importlib.resources.
"""

from __future__ import annotations

import pkgutil
from importlib.resources import files
from pathlib import Path

import pytest

import datafusion_distributed
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, tpch_query

PACKAGE_DIR = Path(datafusion_distributed.__file__).parent

# Modules of the tests' own support code (tests/support/), which must stay out of the package.
TEST_SUPPORT = {"s3_server", "certificates"}


def _module_names() -> list[str]:
    names = [info.name for info in pkgutil.walk_packages([str(PACKAGE_DIR)], "datafusion_distributed.")]
    names += [  # also loose files pkgutil would not reach (a folder without __init__.py)
        ".".join(("datafusion_distributed", *p.relative_to(PACKAGE_DIR).with_suffix("").parts))
        for p in PACKAGE_DIR.rglob("*.py")
    ]
    return sorted(set(names))


def test_the_package_has_no_sqllogictest_runner() -> None:
    found = [n for n in _module_names() if n.rsplit(".", 1)[-1].startswith("slt")]
    assert found == [], "the sqllogictest runner belongs in devtools/slt/"


def test_the_package_has_no_test_only_servers() -> None:
    found = [n for n in _module_names() if n.rsplit(".", 1)[-1] in TEST_SUPPORT]
    assert found == [], "these belong in tests/support/"


def test_the_22_queries_are_package_data() -> None:
    folder = files("datafusion_distributed.test_utils") / "tpch_queries"
    names = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))
    assert names == [f"q{n:02d}.sql" for n in TPCH_QUERY_NUMBERS]
    for n in TPCH_QUERY_NUMBERS:
        text = (folder / f"q{n:02d}.sql").read_text(encoding="utf-8")
        assert text == tpch_query(n)
        assert text.lstrip().startswith(f"-- TPC-H Q{n}:")


def test_the_package_folder_is_packed_whole() -> None:
    """maturin packs every file of the package folder (the queries, the dashboard's files)
    unless told to leave some out: nothing may be."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    path = PACKAGE_DIR.parents[1] / "pyproject.toml"
    if not path.is_file():
        pytest.skip("the package is not imported from a source checkout")
    pyproject = tomllib.loads(path.read_text(encoding="utf-8"))
    assert pyproject["build-system"]["build-backend"] == "maturin"
    maturin = pyproject["tool"]["maturin"]
    assert maturin["python-source"] == "src" and "exclude" not in maturin
