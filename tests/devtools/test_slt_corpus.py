"""DataFusion's own sqllogictest files, run single-node and distributed side by side.

Each record of a file runs in plain DataFusion and through a DistributedContext over the
embedded cluster with every stage split and every join shuffled (`--forced`); a record the
distributed run gets wrong, or fails on alone, is a failure (see devtools/slt/).

The corpus lives outside the repository ($DATAFUSION_SLT_DIR, default
`../shared/datafusion-slt` next to it); without it these tests are skipped.

The round-trip test runs files where DataFusion's own plan serialisation loses something
(`--mode roundtrip`): every difference must be one DistributedContext keeps on one node.
`make slt` runs the whole corpus (reports under slt-reports/).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from datafusion_distributed.test_utils.distribution import assert_share_ran_distributed
from devtools.slt.cli import summary_table
from devtools.slt.runner import (
    CORPUS_ENV,
    FileResult,
    RunOptions,
    default_corpus,
    run_files,
    slt_files,
)

# A CI subset (about a minute on two cores): aggregates, joins, windows, subqueries, unions,
# group by and grouping sets, order/limit, CTEs, types, DML and scratch files.
CI_FILES = (
    "agg_func_substitute.slt",  # CTEs, aggregates
    "aggregates_topk.slt",  # aggregates with ORDER BY ... LIMIT
    "clickbench.slt",  # group by, aggregates over Parquet
    "decimal.slt",  # types
    "dml_delete.slt",  # DELETE, which acts when planned
    "information_schema.slt",  # the user's settings, SHOW
    "eliminate_outer_join.slt",  # outer joins
    "group.slt",  # group by over CSV
    "grouping_set_repartition.slt",  # grouping sets, scratch Parquet
    "imdb.slt",  # many-way joins
    "insert_to_external.slt",  # INSERT, COPY
    "lateral_join.slt",  # correlated and lateral subqueries
    "nested_loop_join_spill.slt",  # nested loop joins under a memory limit
    "push_down_topk_through_join.slt",  # order / limit through joins
    "qualify.slt",  # window functions
    "repartition_subset_satisfaction.slt",  # hash partitioning of joins and aggregates
    "schema_evolution.slt",  # Parquet files with different schemas
    "select.slt",  # general queries
    "subquery_sort.slt",  # subqueries with ORDER BY
    "union_by_name.slt",  # unions
    "window_topn.slt",  # window top-n
)

OPTIONS = RunOptions(mode="distributed", cluster="embedded", forced=True, timeout=60)


def corpus() -> Path:
    folder = default_corpus()
    if not folder.is_dir():
        pytest.skip(f"no sqllogictest corpus at {folder} (set {CORPUS_ENV} to its folder)")
    return folder


def check(results: list[FileResult]) -> None:
    """Fail on a file that could not run and on any record the candidate got wrong."""
    print(summary_table(results))
    problems = [f"{r.file}: {r.error or r.aborted}" for r in results if r.error or r.aborted]
    for result in results:
        for record in result.failures:
            message = record.candidate_error or record.detail
            problems.append(
                f"{record.file}:{record.line} {record.category.value}: {record.sql[:200]!r}\n    {message[:500]}"
            )
    assert not problems, "failures:\n" + "\n".join(problems)


def show_how_records_ran(results: list[FileResult], share: float) -> None:
    """Most records of the corpus are DDL, INSERTs and selects of a few literal rows, which
    DataFusion itself runs in one partition; more than `share` of those that compared equal
    must still have run as several tasks."""
    equal = sum(r.counts["equal"] for r in results)
    assert_share_ran_distributed(sum(r.counts["multi_task"] for r in results), equal, share)


def test_ci_subset_forced_over_the_embedded_cluster():
    folder = corpus()
    start = time.perf_counter()
    results = run_files([folder / name for name in CI_FILES], OPTIONS, folder)
    print(f"{len(results)} files in {time.perf_counter() - start:.0f} s")
    assert [r.file for r in results] == list(CI_FILES)
    check(results)
    show_how_records_ran(results, share=0.2)  # 27% of the CI subset


# Files where DataFusion 55's round trip loses something: Arrow stream files, compressed and
# array-format JSON, compressed CSV, Float16, file_row_index, and nodes with no serialised form.
ROUNDTRIP_FILES = (
    "arrow_files.slt",
    "copy.slt",
    "file_row_index.slt",
    "float16.slt",
    "json.slt",
    "pwmj.slt",
    "window_topn.slt",
)


@pytest.mark.not_a_distributed_run  # DataFusion's plan against its own plan decoded from bytes
def test_every_round_trip_difference_is_kept_on_one_node():
    folder = corpus()
    results = run_files([folder / name for name in ROUNDTRIP_FILES], RunOptions(mode="roundtrip"), folder)
    check(results)
    assert sum(r.counts["kept_on_one_node"] for r in results) > 0


@pytest.mark.slow
def test_whole_corpus_forced_over_the_embedded_cluster():
    folder = corpus()
    results = run_files(slt_files([folder]), OPTIONS, folder)
    assert len(results) >= 200
    check(results)
    show_how_records_ran(results, share=0.05)  # 6% of the whole corpus
