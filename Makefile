# Everything sets itself up on a fresh clone: the first target run creates .venv and
# installs the package (editable) with its development extra, which compiles the data plane
# (native/, Rust, by maturin); later runs skip that step until pyproject.toml or the crate
# changes. Cargo's build folder lives outside the clone, so clones and CI runs share it.

PYTHON ?= python3
VENV ?= .venv
VENV_PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=

# One Cargo workspace (Cargo.toml): the data plane (native/) and the example extension
# (examples/extension_sample/, which the tests build).
NATIVE_SOURCES := Cargo.toml Cargo.lock native/Cargo.toml $(wildcard native/src/*.rs)

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export CARGO_TARGET_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/datafusion-distributed/cargo-target

.PHONY: all setup demo test test-all lint format docs clean-data bench slt fuzz browser screenshots

all: test

$(VENV_PYTHON):
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml $(NATIVE_SOURCES) | $(VENV_PYTHON)
	$(VENV_PYTHON) -m pip install --quiet --upgrade pip
	$(VENV_PYTHON) -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(INSTALLED)

# single-node runs with the allocator setting the worker processes start with: a fair comparison
demo: $(INSTALLED)
	MIMALLOC_PURGE_DECOMMITS=0 $(VENV_PYTHON) examples/demo.py

# the crates' tests build with the release profile, reusing what the package's build compiled
test: $(INSTALLED)
	cargo test --quiet --release --locked --workspace
	$(VENV_PYTHON) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: $(INSTALLED)
	cargo test --quiet --release --locked --workspace
	$(VENV_PYTHON) -m pytest $(PYTEST_ARGS)

# Headless Chromium for the dashboard's browser test: found, or installed from Debian's packages
# when root with apt-get (the test does the same, and skips saying why where it cannot).
browser:
	$(PYTHON) -m devtools.chromium

# The dashboard's screenshots in docs/images/, taken by its browser test.
screenshots: $(INSTALLED)
	DASHBOARD_SCREENSHOTS=docs/images $(VENV_PYTHON) -m pytest tests/dashboard/test_dashboard_browser.py -q

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	cargo fmt --check --all
	cargo clippy --quiet --release --locked --workspace --all-features --all-targets -- -D warnings

# The documentation site (docs/conf.py): the guides and the API reference from the docstrings,
# built into docs/_build/html with every warning an error.
docs: $(INSTALLED)
	$(VENV_PYTHON) -m sphinx -b html -W --keep-going -q docs docs/_build/html

format: $(INSTALLED)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	cargo fmt --all

# TPC-H, single-node against distributed side by side (see benchmarks/README.md); override
# e.g. `make bench BENCH_ARGS="--sf 1 --iterations 5 --queries 1,3"`.
BENCH_ARGS ?= --sf 1 --workers 2 --partitions-per-task 1 --iterations 3
bench: $(INSTALLED)
	$(VENV_PYTHON) benchmarks/tpch.py $(BENCH_ARGS)

# Generated TPC-H data is cached under data/ (or $$DATAFUSION_DISTRIBUTED_DATA).
clean-data:
	rm -rf data/tpch

# DataFusion's sqllogictest files, single-node against distributed, forced to split every stage
# and shuffle every join: over the embedded cluster, then over 3 worker processes. Totals are
# printed; JSON reports go to slt-reports/ (git-ignored). Pass options with SLT_ARGS, e.g.
# `make slt SLT_ARGS="--timeout 30"` (see `python -m devtools.slt -h`).
SLT_DIR ?= ../shared/datafusion-slt
SLT_ARGS ?=
SLT_REPORTS ?= slt-reports
slt: $(INSTALLED)
	@mkdir -p $(SLT_REPORTS)
	DATAFUSION_SLT_DIR=$(SLT_DIR) $(VENV_PYTHON) -m devtools.slt --forced \
		--cluster embedded --report $(SLT_REPORTS)/forced-embedded.json $(SLT_ARGS); embedded=$$?; \
	DATAFUSION_SLT_DIR=$(SLT_DIR) $(VENV_PYTHON) -m devtools.slt --forced \
		--cluster local:3 --report $(SLT_REPORTS)/forced-local3.json $(SLT_ARGS); local=$$?; \
	exit $$((embedded | local))

# Generated SQL, single-node against distributed with distribution forced, on the embedded
# cluster and on worker processes that share nothing; differences are shrunk to a minimal
# query (see devtools/fuzz). E.g. `make fuzz FUZZ_ARGS="--queries 500 --seed 1 -v"`.
FUZZ_ARGS ?= --queries 4000 --report slt-reports/fuzz.json
fuzz: $(INSTALLED)
	@mkdir -p slt-reports
	$(VENV_PYTHON) -m devtools.fuzz $(FUZZ_ARGS)
