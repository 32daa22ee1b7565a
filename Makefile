# The two set-up commands of the README. `make run` is the main job; `make test` is what CI runs.

CARGO ?= cargo

.PHONY: run test fmt

# Main job: build release, write (once) a 2 GiB synthetic store, benchmark the ram, mmap and
# direct readers side by side (page cache evicted, mmap and direct also under a 10% memory cap),
# fio on the same file, MaxSim kernels. Writes bench/results/bench-store.{json,md}.
run:
	@command -v fio >/dev/null || (apt-get install -y fio >/dev/null 2>&1 || (apt-get update >/dev/null && apt-get install -y fio >/dev/null)) || echo "fio could not be installed: the report will say so"
	$(CARGO) build --release -p cellar-cli
	./target/release/cellar bench-store

# Format check, clippy with warnings as errors, every test.
test:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace

fmt:
	$(CARGO) fmt --all
