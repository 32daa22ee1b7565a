#!/bin/sh
# Two builds of the MaxSim kernel bench (crates/cellar-core/benches/kernels.rs) side by side:
# ROUNDS rounds, alternating OLD and NEW, for each query-token count in NQS, at KERNELS_DIMS;
# prints every row, then `bench/kernels_ab.py` the median pairs/s of each and their ratio.
# Make the binaries with `cargo bench -p cellar-core --bench kernels --no-run` at each commit and
# copy target/release/deps/kernels-* to OLD and NEW.
#   OLD=/tmp/kab/kernels-old NEW=/tmp/kab/kernels-new NQS="4 8" ROUNDS=5 sh bench/kernels-ab.sh
set -eu
: "${OLD:?path of the old bench binary}" "${NEW:?path of the new bench binary}"
NQS=${NQS:-"4 8"}
ROUNDS=${ROUNDS:-5}
export KERNELS_DIMS=${KERNELS_DIMS:-64,128}
grep -m1 'model name' /proc/cpuinfo
for round in $(seq "$ROUNDS"); do
    for side in old new; do
        bin=$OLD
        [ "$side" = new ] && bin=$NEW
        for nq in $NQS; do
            KERNELS_QUERY_TOKENS=$nq "$bin" --bench | grep -E '^\| [a-z0-9]+ \| [0-9]+ \| (scalar|avx2|avx512) ' |
                sed "s/^/$side nq=$nq round=$round /"
        done
    done
done
