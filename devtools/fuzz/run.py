"""A differential run: generated queries, each single-node and distributed, counted by outcome;
every difference shrunk to a minimal query and reported with its settings profile and setup.

`python -m devtools.fuzz --queries 3000` (or `make fuzz`); `-h` for the options.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

from datafusion_distributed import EmbeddedCluster, LocalCluster

from .differ import BAD, PROFILES, SETUPS, Differ, Outcome, Setup
from .generator import Query, QueryGenerator
from .tables import write_tables

SHRINK_RUNS = 300  # runs one shrink may take


@dataclass
class Finding:
    """A query that differs, shrunk: its SQL, settings profile, setup and outcome."""

    sql: str
    profile: str
    setup: str
    kind: str
    detail: str
    original: str


@dataclass
class Report:
    """The totals of a run."""

    queries: int = 0
    outcomes: Counter = field(default_factory=Counter)
    planned: int = 0  # queries single-node answers (the one-node share's denominator)
    distributed: int = 0  # queries that ran as several tasks
    one_node: Counter = field(default_factory=Counter)  # why planned queries ran on one node
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def one_node_share(self) -> float:
        """The share of answered queries kept on one node by the fidelity check."""
        return sum(self.one_node.values()) / self.planned if self.planned else 0.0

    @property
    def bad(self) -> int:
        """Queries that differ: wrong answers and errors on one side only."""
        return sum(self.outcomes[kind] for kind in BAD)

    def add(self, outcome: Outcome) -> None:
        self.queries += 1
        self.outcomes[outcome.kind] += 1
        self.distributed += outcome.distributed
        if outcome.kind != "both fail":
            self.planned += 1
            if outcome.one_node:
                self.one_node[reason_kind(outcome.one_node)] += 1

    def summary(self) -> str:
        lines = [
            f"{self.queries} queries in {self.seconds:.0f} s: "
            + ", ".join(f"{n} {k}" for k, n in self.outcomes.most_common())
        ]
        lines.append(f"ran as several tasks: {self.distributed}")
        lines.append(
            f"on one node: {sum(self.one_node.values())} of {self.planned} ({100 * self.one_node_share:.1f} %)"
        )
        lines += [f"  {n:5d}  {reason}" for reason, n in self.one_node.most_common(8)]
        for finding in self.findings:
            lines.append(
                f"\n{finding.kind} [{finding.profile}; {finding.setup}]\n  {finding.sql}\n  {finding.detail[:400]}"
            )
        return "\n".join(lines)

    def as_json(self) -> dict:
        return {
            "queries": self.queries,
            "outcomes": dict(self.outcomes),
            "planned": self.planned,
            "distributed": self.distributed,
            "one_node": dict(self.one_node),
            "one_node_share": self.one_node_share,
            "findings": [asdict(f) for f in self.findings],
            "seconds": self.seconds,
        }


def reason_kind(reason: str) -> str:
    """A one-node reason without the query's own names and values, to count alike reasons."""
    reason = re.sub(r"'[^']*' becomes '[^']*'", "...", reason)
    reason = re.sub(r"\b(becomes|from its bytes:) .*", r"\1 ...", reason)
    return reason[:160]


def shrink(differ: Differ, query: Query, profile: str, setup: Setup, kind: str) -> tuple[Query, str]:
    """The smallest query (and plainest profile) found that still differs as `kind`."""
    runs = 0

    def still_fails(candidate: Query, candidate_profile: str) -> bool:
        nonlocal runs
        runs += 1
        return differ.run(candidate.sql(), candidate_profile, setup).kind == kind

    if profile != "default" and still_fails(query, "default"):
        profile = "default"
    progress = True
    while progress and runs < SHRINK_RUNS:
        progress = False
        for candidate in query.smaller():
            if runs >= SHRINK_RUNS:
                break
            if still_fails(candidate, profile):
                query, progress = candidate, True
                break
    return query, profile


def generated(seed: int, count: int, setups: Sequence[Setup]) -> Iterator[tuple[Query, str, Setup]]:
    """`count` queries from `seed`, each with its profile and setup."""
    rng = random.Random(seed)
    for i in range(count):
        query = QueryGenerator(seed * 1_000_003 + i).query()
        yield query, rng.choice(list(PROFILES)), setups[i % len(setups)]


def run(
    seed: int,
    count: int,
    setups: Sequence[Setup],
    workers: int = 3,
    shrink_failures: bool = True,
    verbose: bool = False,
) -> Report:
    """Generate and compare `count` queries over `setups`; the clusters are started here."""
    report = Report()
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="fuzz-tables-"))
        tables = write_tables(folder, seed)
        clusters: dict[str, object] = {}
        if any(s.cluster == "embedded" for s in setups):
            clusters["embedded"] = stack.enter_context(EmbeddedCluster(2))
        if any(s.cluster == "workers" for s in setups):
            clusters["workers"] = stack.enter_context(LocalCluster(workers, share_spools=False))
        differ = Differ(tables, clusters)
        stack.callback(differ.close)
        for query, profile, setup in generated(seed, count, setups):
            sql = query.sql()
            outcome = differ.run(sql, profile, setup)
            report.add(outcome)
            if verbose:
                print(f"{outcome.kind:24s} {sql}", file=sys.stderr)
            elif report.queries % 250 == 0:
                print(f"{report.queries} queries: {dict(report.outcomes)}", file=sys.stderr, flush=True)
            if outcome.kind in BAD:
                small, small_profile = (
                    shrink(differ, query, profile, setup, outcome.kind)
                    if shrink_failures
                    else (query, profile)
                )
                detail = differ.run(small.sql(), small_profile, setup).detail or outcome.detail
                report.findings.append(
                    Finding(small.sql(), small_profile, setup.name, outcome.kind, detail, sql)
                )
    report.seconds = time.perf_counter() - started
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.fuzz", description=__doc__)
    parser.add_argument("--queries", type=int, default=500, help="how many queries (default 500)")
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (default: from the clock)")
    parser.add_argument(
        "--setups",
        default=",".join(SETUPS),
        help="comma-separated distributed setups, of: " + ", ".join(SETUPS),
    )
    parser.add_argument("--workers", type=int, default=3, help="worker processes of the workers setups")
    parser.add_argument("--no-shrink", action="store_true", help="report differences as generated")
    parser.add_argument("--report", help="write the totals and findings as JSON to this file")
    parser.add_argument("--max-one-node", type=float, default=0.02, help="fail above this one-node share")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every query and its outcome")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    names = args.setups.split(",")
    unknown = [name for name in names if name not in SETUPS]
    if unknown:
        parser.error(f"unknown setup(s) {unknown}; known: {list(SETUPS)}")
    print(f"seed {seed}", file=sys.stderr)
    report = run(
        seed, args.queries, [SETUPS[n] for n in names], args.workers, not args.no_shrink, args.verbose
    )
    print(report.summary())
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report.as_json(), f, indent=2)
    return 1 if report.bad or report.one_node_share > args.max_one_node else 0
