#!/bin/sh
# Coverage-guided fuzzing of Cellar's byte parsers on stable Rust (issue 16.3), from the
# checkout's root: builds the libFuzzer targets of fuzz/ (their own workspace) with the
# SanitizerCoverage flags `cargo fuzz build --sanitizer none` passes, all stable rustc options
# (no nightly, no sanitizer), writes a seed corpus from Cellar's own writers (fuzz/corpus), and
# runs each target for $SECONDS_PER_TARGET seconds (default 60), one job. Writes
# bench/results/fuzz-coverage.md: executions, exec/s and coverage (libFuzzer's `cov:` covered
# edges and `ft:` features) once the seeds ran and at the end, per target. Crashing inputs go to
# fuzz/artifacts/<target>/, each target's log to fuzz/artifacts/<target>.log. `--target` keeps
# RUSTFLAGS off build scripts and proc macros, which would not link without libFuzzer. The
# parsers that read a path write into $CELLAR_FUZZ_SCRATCH (default /dev/shm/cellar-fuzz-coverage,
# removed at the end).
set -eu
SECS=${SECONDS_PER_TARGET:-60}
HOST=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/fuzz/target}
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
TARGETS="file-header small-file offsets record manifest wal stream-segment stream-entry stream-log stream-manifest feed-line"
OUT=bench/results/fuzz-coverage.md
export CELLAR_FUZZ_SCRATCH=${CELLAR_FUZZ_SCRATCH:-/dev/shm/cellar-fuzz-coverage}

start=$(date +%s)
(cd fuzz && cargo build --release --bins --target "$HOST")
build_s=$(($(date +%s) - start))
BIN=$CARGO_TARGET_DIR/$HOST/release

rm -rf fuzz/corpus fuzz/artifacts
mkdir -p fuzz/artifacts
"$BIN/seeds" fuzz/corpus

{
    echo "# Coverage-guided fuzzing of the byte parsers (libFuzzer, stable Rust)"
    echo
    echo "\`bench/fuzz-coverage.sh\`, $SECS s per target, one job, \`-rss_limit_mb=2048 -max_len=1048576 -timeout=10\`,"
    echo "seeds from Cellar's own writers (fuzz/src/seeds.rs). *cov* is libFuzzer's covered edges"
    echo "(*ft* its features) once the seed corpus ran (INITED) and at the end."
    echo
    echo "- CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1) ($(nproc) cores)"
    echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD); $(rustc --version)"
    echo "- Build: \`cargo build --release --bins --target $HOST\` in fuzz/, ${build_s} s (incremental when fuzz/target is warm), with"
    echo "  \`RUSTFLAGS=\"$RUSTFLAGS\"\`"
    echo
    echo "| target | executions | exec/s | cov start (ft) | cov end (ft) | new corpus units | crashes |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
} > "$OUT"

crashes=""
for t in $TARGETS; do
    mkdir -p "fuzz/artifacts/$t"
    log=fuzz/artifacts/$t.log
    "$BIN/$t" -max_total_time="$SECS" -rss_limit_mb=2048 -max_len=1048576 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" "fuzz/corpus/$t" > "$log" 2>&1 || true
    stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    cov() { sed -n "$1" "$log" | sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\).*/\1 (\2)/p' | tail -1; }
    found=$(find "fuzz/artifacts/$t" -type f | wc -l)
    echo "| $t | $(stat number_of_executed_units) | $(stat average_exec_per_sec) | $(cov '/INITED/p') | $(cov '/ cov: /p') | $(stat new_units_added) | $found |" >> "$OUT"
    [ "$found" -eq 0 ] || crashes="$crashes $t"
done

echo >> "$OUT"
if [ -z "$crashes" ]; then
    echo "No crash, timeout or out-of-memory input." >> "$OUT"
fi
for t in $crashes; do
    for f in fuzz/artifacts/"$t"/*; do
        {
            echo "## $t: \`$(basename "$f")\` ($(wc -c < "$f") bytes)"
            echo
            echo '```'
            sed -n '/panicked at\|ERROR: libFuzzer\|memory allocation/{p;n;p}' "fuzz/artifacts/$t.log" | head -6
            echo '```'
            echo
            echo "Input (hex, first 512 bytes): \`$(head -c 512 "$f" | od -An -v -tx1 | tr -d ' \n')\`"
            echo
        } >> "$OUT"
    done
done
rm -rf "$CELLAR_FUZZ_SCRATCH"
cat "$OUT"
