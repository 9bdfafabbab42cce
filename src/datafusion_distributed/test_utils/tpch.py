"""TPC-H data and queries for tests, examples and benchmarks.

Data is generated with the ``tpchgen-cli`` executable (installed by the ``dev`` extra) as
Parquet, one folder per table holding ``parts`` files (the small tables ``nation`` and
``region`` get a single file). Each data set is generated once and cached under
``<data>/tpch/sf<SF>-p<N>/``, where ``<data>`` is ``$DATAFUSION_DISTRIBUTED_DATA`` when set,
else the ``data/`` folder of the source checkout this module runs from, else (an installed
package) ``$XDG_CACHE_HOME/datafusion-distributed`` (``~/.cache/datafusion-distributed``). Generation writes into a temporary
folder next to the final one and renames it into place, so a data set is either complete
or absent, and several processes may ask for the same data at once.

The 22 queries ship with the package, as ``tpch_queries/qNN.sql`` next to this module, and
are read with :mod:`importlib.resources`, so they work from an installed wheel as well as from
a source checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_DIR_ENV",
    "TPCH_QUERY_NUMBERS",
    "TPCH_TABLES",
    "find_tpchgen_cli",
    "register_tpch",
    "repo_root",
    "tpch_data",
    "tpch_query",
    "tpch_query_path",
]

#: The eight TPC-H tables, each a folder of Parquet files in a generated data set.
TPCH_TABLES: tuple[str, ...] = (
    "customer",
    "lineitem",
    "nation",
    "orders",
    "part",
    "partsupp",
    "region",
    "supplier",
)

#: The numbers of the 22 TPC-H queries.
TPCH_QUERY_NUMBERS = range(1, 23)

#: Environment variable naming the folder that holds cached data (see the module's docstring).
DATA_DIR_ENV = "DATAFUSION_DISTRIBUTED_DATA"

# Written last into a data set before it is renamed into place.
_MARKER = "_tpch.json"


def repo_root() -> Path | None:
    """The root of the source checkout this module runs from, or ``None`` for an installed package."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "src").is_dir() else None


def data_root() -> Path:
    """Where generated test data is cached: DATAFUSION_DISTRIBUTED_DATA when set, else a
    source checkout's data/ folder, else the user's cache folder."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured)
    checkout = repo_root()
    if checkout is not None:
        return checkout / "data"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "datafusion-distributed"


def _format_scale_factor(scale_factor: float) -> str:
    if scale_factor <= 0:
        raise ValueError(f"scale factor must be positive, got {scale_factor}")
    return f"{scale_factor:g}"


def find_tpchgen_cli() -> str:
    """Path of the ``tpchgen-cli`` executable: next to the running Python first, then on PATH."""
    name = "tpchgen-cli.exe" if sys.platform == "win32" else "tpchgen-cli"
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    on_path = shutil.which("tpchgen-cli")
    if on_path:
        return on_path
    raise FileNotFoundError(
        "tpchgen-cli not found next to the Python interpreter or on PATH; "
        "install the development extra: pip install -e '.[dev]'"
    )


def tpch_data(scale_factor: float, parts: int = 4, *, data_dir: str | os.PathLike | None = None) -> Path:
    """Folder holding TPC-H data at ``scale_factor`` split into ``parts`` Parquet files per table.

    The data is generated on first use and reused afterwards. The folder contains one
    sub-folder per table in :data:`TPCH_TABLES`, each with files ``<table>.<k>.parquet``.
    ``data_dir`` overrides where the cache lives (by default as the module's docstring says);
    the data set is ``<data_dir>/tpch/sf<SF>-p<N>``.
    """
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    sf = _format_scale_factor(scale_factor)
    root = (Path(data_dir) if data_dir is not None else data_root()) / "tpch"
    target = root / f"sf{sf}-p{parts}"
    if _is_complete(target):
        return target
    if target.exists():
        raise RuntimeError(f"{target} exists but is not a complete TPC-H data set; delete it and retry")

    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=root))
    try:
        _generate(staging, sf, parts)
        try:
            staging.rename(target)
        except OSError:
            # Another process finished the same data set first; use theirs.
            if not _is_complete(target):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _is_complete(path: Path) -> bool:
    return (path / _MARKER).is_file()


def _generate(out: Path, sf: str, parts: int) -> None:
    command = [
        find_tpchgen_cli(),
        "parquet",
        f"--scale-factor={sf}",
        f"--parts={parts}",
        f"--output-dir={out}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed with exit code {result.returncode}:\n{result.stderr}{result.stdout}"
        )
    missing = [t for t in TPCH_TABLES if not any((out / t).glob("*.parquet"))]
    if missing:
        raise RuntimeError(f"tpchgen-cli produced no Parquet files for {missing} in {out}")
    info = {"scale_factor": sf, "parts": parts, "tables": list(TPCH_TABLES)}
    (out / _MARKER).write_text(json.dumps(info, indent=2) + "\n")


def register_tpch(ctx: Any, path: str | os.PathLike) -> None:
    """Register the eight TPC-H tables of the data set at ``path`` in a DataFusion ``SessionContext``."""
    path = Path(path)
    for table in TPCH_TABLES:
        ctx.register_parquet(table, str(path / table))


# The folder of the query files, package data beside this module.
_QUERIES = "tpch_queries"


def _query_name(n: int) -> str:
    if n not in TPCH_QUERY_NUMBERS:
        raise ValueError(f"TPC-H queries are numbered 1 to 22, got {n}")
    return f"q{n:02d}.sql"


def tpch_query_path(n: int) -> Path:
    """Path of the SQL file of TPC-H query ``n`` (1 to 22), shipped inside the package.

    A file on disk when the package is installed as files (a wheel or a checkout); to read the
    query wherever the package lives, use :func:`tpch_query`.
    """
    return Path(__file__).with_name(_QUERIES) / _query_name(n)


def tpch_query(n: int) -> str:
    """The SQL text of TPC-H query ``n`` (1 to 22): a single statement DataFusion runs as is."""
    name = _query_name(n)
    return (files(__package__) / _QUERIES / name).read_text(encoding="utf-8")
