"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from datafusion_distributed.test_utils.tpch import tpch_data


@pytest.fixture(scope="session")
def tpch_sf001() -> Path:
    """TPC-H at scale factor 0.01 (about 10 MB), 4 Parquet files per table; cached across runs."""
    return tpch_data(0.01, parts=4)


@pytest.fixture(scope="session")
def tpch_sf01() -> Path:
    """TPC-H at scale factor 0.1 (about 100 MB), 4 Parquet files per table; cached across runs."""
    return tpch_data(0.1, parts=4)
