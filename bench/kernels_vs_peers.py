"""Issue 13.5: Cellar's MaxSim kernels side by side with the MaxSim peers on the same shapes, in
one run: a 32-token query against 64 documents of ~300 tokens, d = 128 and 384.

- Cellar: `cargo bench -p cellar-core --bench kernels` (every codec, every level this CPU runs,
  each checked against the scalar reference first), run by this script with KERNELS_DOCS=64,
  KERNELS_TOKENS=300 (synthetic documents of 300 tokens on average, log-normal) and
  KERNELS_DIMS=128,384; its table is parsed.
- maxsim-cpu (PyPI): `maxsim_scores(query, docs)` on f32 documents of exactly 300 tokens.
- numpy / BLAS: one (64 * 300, d) x (d, 32) matrix product, the max over each document's
  tokens, the sum over query tokens.

Every figure is query-token x document-token pairs per second on one thread (BLAS and
maxsim-cpu are pinned to one thread through the usual environment variables), and the fraction
of this core's FMA peak at the nominal clock of /proc/cpuinfo: 2 FMA units x 8 f32 lanes x 2
flops per cycle; AVX-512 levels double the lanes on Intel, not on AMD Zen 4 (family 25), whose
two FMA units are 256 bits wide and run a 512-bit FMA as two halves.
Re-run: python3 bench/kernels_vs_peers.py [OUT]  (needs `pip install maxsim-cpu numpy`; writes
OUT, by default bench/results/kernels-vs-peers.md)
"""
import os
import re
import subprocess
import sys
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402

try:
    import importlib.metadata

    MAXSIM_CPU_VERSION = importlib.metadata.version("maxsim-cpu")
except importlib.metadata.PackageNotFoundError:
    sys.exit("kernels_vs_peers: maxsim-cpu is not installed (pip install maxsim-cpu)")

NQ, DOCS, TOKENS, DIMS = 32, 64, 300, (128, 384)
ROUNDS, SECONDS = 3, 0.4


def cpu():
    text = open("/proc/cpuinfo").read()
    model = re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
    mhz = float(re.search(r"cpu MHz\s*:\s*([\d.]+)", text).group(1))
    flags = re.search(r"flags\s*:\s*(.*)", text).group(1).split()
    vendor = re.search(r"vendor_id\s*:\s*(.*)", text).group(1).strip()
    family = int(re.search(r"cpu family\s*:\s*(\d+)", text).group(1))
    # f32 lanes one FMA unit retires per cycle at the AVX-512 level.
    wide = 8 if vendor == "AuthenticAMD" and family <= 25 else 16
    return model, mhz, "avx512f" in flags, f"{vendor} family {family}", wide


def best_rate(fn, pairs):
    best = 0.0
    for _ in range(ROUNDS):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < SECONDS:
            fn()
            n += 1
        best = max(best, n * pairs / (time.perf_counter() - start))
    return best


def cellar_rows():
    env = dict(os.environ, KERNELS_DOCS=str(DOCS), KERNELS_TOKENS=str(TOKENS),
               KERNELS_DIMS=",".join(map(str, DIMS)))
    out = subprocess.run(["cargo", "bench", "-q", "-p", "cellar-core", "--bench", "kernels"],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"kernels_vs_peers: the Cellar kernel bench failed:\n{out.stdout}\n{out.stderr}")
    rows = []
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[1].isdigit():
            rows.append((f"cellar {cells[0]}", int(cells[1]), cells[2], float(cells[3])))
    return rows, out.stdout


PEER_CHILD = """
import sys, time, numpy as np, maxsim_cpu
nq, docs, tokens, dim, rounds, seconds = (float(a) if '.' in a else int(a) for a in sys.argv[1:])
rng = np.random.default_rng(7)
q = rng.standard_normal((nq, dim), dtype=np.float32)
d = rng.standard_normal((docs, tokens, dim), dtype=np.float32)
scores = np.asarray(maxsim_cpu.maxsim_scores(q, d))
best = 0.0
for _ in range(rounds):
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        maxsim_cpu.maxsim_scores(q, d)
        n += 1
    best = max(best, n * nq * docs * tokens / (time.perf_counter() - start))
print(best)
print(" ".join(repr(float(s)) for s in scores))
"""


def maxsim_cpu_rate(dim):
    """maxsim-cpu in a process of its own: after numpy's BLAS had run in the same process, its
    first call crashed (libxsmm warns that it wants to be linked against the BLAS sgemm)."""
    args = [str(a) for a in (NQ, DOCS, TOKENS, dim, ROUNDS, SECONDS)]
    out = subprocess.run([sys.executable, "-c", PEER_CHILD, *args], capture_output=True, text=True)
    if out.returncode != 0:
        return None, f"exit {out.returncode}"
    rate, scores = out.stdout.strip().splitlines()[-2:]
    return float(rate), np.array([float(s) for s in scores.split()], dtype=np.float32)


def peer_rows():
    rng = np.random.default_rng(7)
    rows = []
    for dim in DIMS:
        q = rng.standard_normal((NQ, dim), dtype=np.float32)
        d = rng.standard_normal((DOCS, TOKENS, dim), dtype=np.float32)
        flat = d.reshape(DOCS * TOKENS, dim)
        pairs = NQ * DOCS * TOKENS

        def numpy_maxsim():
            return (flat @ q.T).reshape(DOCS, TOKENS, NQ).max(axis=1).sum(axis=1)

        reference = np.einsum("qk,ntk->nqt", q, d).max(-1).sum(-1)
        for name, rate, got in (
            ("numpy/BLAS f32", None, numpy_maxsim()),
            ("maxsim-cpu f32", *maxsim_cpu_rate(dim)),
        ):
            if isinstance(got, str):
                rows.append((f"{name} (FAILED: {got})", dim, "-", float("nan")))
            elif not np.allclose(got, reference, rtol=1e-3, atol=1e-2):
                worst = float(np.max(np.abs(got - reference) / np.abs(reference)))
                rows.append((f"{name} (WRONG scores: relative error up to {worst:.1e})", dim, "-", rate or float("nan")))
            else:
                rows.append((name, dim, "-", rate if rate is not None else best_rate(numpy_maxsim, pairs)))
    return rows


def main():
    model, mhz, avx512, family, wide = cpu()
    out_path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/kernels-vs-peers.md"
    cellar, raw = cellar_rows()
    peers = peer_rows()
    lines = [
        "# MaxSim kernels against the peers (issue 13.5)\n",
        f"Command: `python3 bench/kernels_vs_peers.py {out_path}`. Machine: {model} ({family}), {mhz:.0f} MHz nominal, "
        f"{'AVX-512' if avx512 else 'AVX2, no AVX-512'}; one thread each; numpy {np.__version__}; "
        f"maxsim-cpu {MAXSIM_CPU_VERSION} (run in a child process: it crashed after numpy's BLAS had run in the same one).\n",
        f"Shapes: a {NQ}-token query against {DOCS} documents of {TOKENS} tokens (Cellar: synthetic "
        f"documents of {TOKENS} tokens on average), d = {', '.join(map(str, DIMS))}. "
        f"Peak: 2 FMA units x 8 f32 lanes ({wide} at the avx512 level on this CPU) x 2 flops per cycle at the nominal clock "
        "of /proc/cpuinfo; a fraction above 1 means the core ran above its nominal clock (boost), so read the "
        "fractions side by side, not as absolutes.\n",
        "| kernel | d | level | pairs/s | GFLOP/s | fraction of FMA peak |",
        "|---|---|---|---|---|---|",
    ]
    for name, dim, level, rate in sorted(cellar + peers, key=lambda r: (r[1], r[0], r[2])):
        lanes = wide if level == "avx512" else 8
        peak = 2 * lanes * 2 * mhz * 1e6
        gflops = rate * 2 * dim
        lines.append(f"| {name} | {dim} | {level} | {rate:.3e} | {gflops / 1e9:.1f} | {gflops / peak:.2f} |")
    lines.append("\nThe Cellar bench's own output (agreement with scalar first, then timings):\n")
    lines.append("```\n" + raw.strip() + "\n```\n")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    open(out_path, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
