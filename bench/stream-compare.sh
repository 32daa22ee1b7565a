#!/bin/sh
# The streaming benchmark of two revisions side by side (issue 46): `cellar-bench stream` of an old
# and a new commit, release builds, run with the same arguments on the same machine, alternating
# old/new for $ROUNDS rounds. Writes bench/results/stream-compare.md (and .json): feed docs/s
# (batches and single puts), per size class cold and warm P50/P95, scan MB/s and scan/disk, each
# binary's rounds, the new/old ratio of their means and each binary's round-to-round spread.
#
#   bench/stream-compare.sh [BASE [NEW]]   (from the checkout's root; `make bench-stream-compare
#                                           [BASE=rev] [NEW=rev]` passes them as variables)
#
# BASE (default 430a02d, the engine before the one document model) and NEW (default HEAD) are
# committed revisions, never the working tree: each is a `git worktree` of its own ($TREES-old,
# $TREES-new, reused across runs so their builds stay incremental). A tree whose bench lacks the
# P95 columns gets bench/stream-compare-p95.patch, which touches crates/cellar-bench/src/stream/
# only, never the engine. Each side builds in a target directory of its own ($TARGET-old,
# $TARGET-new: the two trees' crates share unit hashes, so one directory would rebuild both each
# time), seeded once with hard links to target/release's release dependencies (see seed below). Knobs: ROUNDS (2), STREAM_ARGS (below), COMPARE_WORK (bench/work/stream-compare),
# RESULTS (bench/results), NAME (stream-compare: the results' file name), TREES, TARGET.
# `make bench-stream-compare` also runs NAME=stream-compare-small-groups with
# STREAM_ARGS='--scale 0.002 --queries 2000 --no-global': groups of 1 to 200 documents, where the
# fixed cost of a search (checking the request, preparing its vectors) is most of a warm query.
# The default arguments skip the global collection (--no-global): with it (STREAM_ARGS without
# --no-global) the table also has the filtered global scans, and a run takes several times longer.
set -eu
BASE=${1:-${BASE:-430a02d}}
NEW=${2:-${NEW:-HEAD}}
ROUNDS=${ROUNDS:-2}
STREAM_ARGS=${STREAM_ARGS:---scale 0.1 --queries 20 --no-global}
ROOT=$(pwd)
W=${COMPARE_WORK:-bench/work/stream-compare}
RESULTS=${RESULTS:-bench/results}
TREES=${TREES:-/tmp/cellar-stream-compare}
TARGET=${TARGET:-$W/target}  # one per side: $TARGET-old, $TARGET-new
PATCH=$ROOT/bench/stream-compare-p95.patch
abs() { case $1 in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
W=$(abs "$W")
RESULTS=$(abs "$RESULTS")
TARGET=$(abs "$TARGET")
TREES=$(abs "$TREES")

die() { echo "stream-compare: error: $*" >&2; exit 2; }
[ -e .git ] && [ -f "$PATCH" ] || die "run it from the checkout's root (bench/stream-compare-p95.patch beside it)"
OLD_SHA=$(git rev-parse --verify -q "$BASE^{commit}") || die "no commit $BASE"
NEW_SHA=$(git rev-parse --verify -q "$NEW^{commit}") || die "no commit $NEW"
NAME=${NAME:-stream-compare}
RUNS=$W/runs/$NAME
mkdir -p "$W/bin" "$RUNS" "$RESULTS"

# seed DIR: a target directory for one side, its release dependencies hard links to target/release's
# (never rewritten: a fresh unit's files are left alone, and rustc replaces an output by renaming).
# The workspace's own units are left out: a tree's crates get the same unit hashes as the checkout's
# (cargo hashes a path relative to the workspace), and cargo rewrites fingerprints and dep-info in
# place, which would write through a link into target/release (and a build in the checkout would
# rewrite the binaries' dep-info, deps/cellar-*, under the side's feet). Fingerprints are copied, not linked.
seed() {
    [ -d "$1/release" ] || [ ! -d target/release ] || {
        echo "seeding $1 from target/release (its release dependencies reused)"
        mkdir -p "$1"
        cp -al target/release "$1/release"
        rm -rf "$1/release/.fingerprint" "$1"/release/build/cellar-* "$1"/release/deps/*cellar_* \
            "$1"/release/deps/cellar-* \
            "$1/release/incremental" "$1"/release/cellar "$1"/release/cellar-bench "$1"/release/*.d \
            "$1/release/.cargo-lock"
        cp -a target/release/.fingerprint "$1/release/.fingerprint"
        rm -rf "$1"/release/.fingerprint/cellar-*
        touch "$1/seeded"
    }
}

# build SIDE SHA: the worktree $TREES-SIDE at SHA (P95 patch applied where missing), its release
# cellar-bench copied to $W/bin/cellar-bench-SIDE; $W/bin/patched-SIDE says whether it was patched.
build() {
    tree=$TREES-$1
    if ! git worktree list --porcelain | grep -qx "worktree $tree"; then
        rm -rf "$tree"
        git worktree prune
        git worktree add -q --detach "$tree" "$2"
    fi
    # A tree already at $2 as the last run left it is not rewritten: its build stays fresh.
    if [ "$(git -C "$tree" rev-parse HEAD)" != "$2" ] || ! git -C "$tree" diff | cmp -s - "$W/bin/tree-$1.diff"; then
        git -C "$tree" reset -q --hard
        git -C "$tree" checkout -q --detach "$2"
        if grep -q cold_ms_p95 "$tree/crates/cellar-bench/src/stream/measure.rs"; then
            echo "no" > "$W/bin/patched-$1"
        else
            git -C "$tree" apply "$PATCH" || die "bench/stream-compare-p95.patch does not apply to $2's bench"
            echo "yes" > "$W/bin/patched-$1"
        fi
        git -C "$tree" diff > "$W/bin/tree-$1.diff"
    fi
    target=$TARGET-$1
    seed "$target"
    echo "building cellar-bench at $2 ($1) in $tree"
    (cd "$tree" && CARGO_TARGET_DIR=$target cargo build --release -q -p cellar-bench) || die "the build at $2 failed"
    # A linked file rewritten in place would have changed target/release too: say so loudly.
    if [ -f "$target/seeded" ]; then
        shared=$(cd "$target/release" && find . -type f -links +1 -newer "$target/seeded" | while read -r f; do
            if [ "$f" -ef "$ROOT/target/release/$f" ]; then echo "$f"; fi; done)
        [ -z "$shared" ] || die "the build rewrote files it shares with target/release: $shared"
    fi
    cp "$target/release/cellar-bench" "$W/bin/cellar-bench-$1"
}
build old "$OLD_SHA"
build new "$NEW_SHA"

load() { cut -d' ' -f1-3 /proc/loadavg; }
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
LOADS=$RUNS/loads.tsv
: > "$LOADS"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for side in old new; do
        out=$RUNS/$side-$r
        rm -rf "$out"
        mkdir -p "$out"
        before=$(load)
        start=$(date +%s)
        echo "round $r, $side: cellar-bench stream $STREAM_ARGS (load $before)"
        # From its own tree, so the report's provenance names its commit ("+changes": the patch).
        # shellcheck disable=SC2086 # STREAM_ARGS is a list of arguments
        (cd "$TREES-$side" && "$W/bin/cellar-bench-$side" stream $STREAM_ARGS --work "$W/run-data" --out "$out") \
            > "$out/stdout.md" 2> "$out/stderr.log" || die "round $r, $side failed: see $out/stderr.log"
        printf '%s\t%s\t%s\t%s\t%s\n' "$side" "$r" "$before" "$(load)" "$(($(date +%s) - start))" >> "$LOADS"
    done
    r=$((r + 1))
done
rm -rf "$W/run-data"

CPU=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
export OLD_SHA NEW_SHA ROUNDS STREAM_ARGS DATE CPU W RUNS RESULTS LOADS NAME
export OLD_SUBJECT="$(git log -1 --format=%s "$OLD_SHA" | cut -c1-100)"
export NEW_SUBJECT="$(git log -1 --format=%s "$NEW_SHA" | cut -c1-100)"
export CORES="$(nproc)"
python3 bench/stream_compare.py
