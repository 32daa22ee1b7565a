"""Squared error of residual buckets, equal-quantile against Lloyd-Max, on real token vectors.

Reads the token vectors of an f16 index (`cellar index DATA --out DIR --codec f16`), fits
K centroids by plain k-means (torch, not Cellar's tree) on FIT sample tokens, and reports, on
50,000 held-out tokens, the squared error of 1/2/4-bit buckets of the per-dimension-scaled
residuals relative to the residual's energy, for buckets at equal quantiles (each value its
members' mean) and for Lloyd-Max buckets. A study behind bench/results/codecs-scifact.md:

    python3 bench/residual_buckets_study.py /path/to/f16-index [K=4096] [FIT=65536]

Needs numpy and torch (CPU). Not part of the test suite.
"""
import sys

import numpy as np
import torch

HEADER = 64  # bytes of the file header before the offsets table's body


def load_tokens(index):
    entries = np.fromfile(f"{index}/vectors/offsets.bin", dtype=np.uint8)[HEADER:].reshape(-1, 16)
    offsets = entries[:, :8].copy().view(np.uint64).ravel()
    lengths = entries[:, 8:12].copy().view(np.uint32).ravel()
    data = np.memmap(f"{index}/vectors/vectors.bin", dtype=np.uint8, mode="r")
    rows = []
    for off, length in zip(offsets, lengths):
        record = data[off:off + length]
        n_tokens, flags = (int(x) for x in record[:8].view(np.uint32))
        if flags != 0:
            sys.exit("records with pooled vectors or passages are not read by this study")
        rows.append(record[8:].view(np.float16)[: n_tokens * 384].reshape(n_tokens, 384))
    return np.concatenate(rows).astype(np.float32)


def assign(x, c):
    half = (c * c).sum(1) / 2
    return torch.cat([(x[i:i + 8192] @ c.T - half).argmax(1) for i in range(0, len(x), 8192)])


def kmeans(x, k, passes=12):
    c = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(1))[:k]].clone()
    for _ in range(passes):
        a = assign(x, c)
        sums = torch.zeros_like(c).index_add_(0, a, x)
        counts = torch.bincount(a, minlength=k).float()
        full = counts > 0
        c[full] = sums[full] / counts[full, None]
    return c


def equal_quantiles(values, bits):
    v = np.sort(values)
    n, buckets = len(v), 1 << bits
    bounds = [b * n // buckets for b in range(buckets + 1)]
    cutoffs = np.array([v[i] for i in bounds[1:buckets]])
    weights = np.array([v[bounds[b]:bounds[b + 1]].mean() for b in range(buckets)])
    return cutoffs, weights


def lloyd_max(values, bits, passes=200):
    cutoffs, weights = equal_quantiles(values, bits)
    for _ in range(passes):
        code = np.searchsorted(cutoffs, values, side="right")
        weights = np.array([values[code == b].mean() if (code == b).any() else w for b, w in enumerate(weights)])
        cutoffs = (weights[1:] + weights[:-1]) / 2
    return cutoffs, weights


def main():
    index = sys.argv[1]
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    fit_n = int(sys.argv[3]) if len(sys.argv) > 3 else 65536
    x = load_tokens(index)
    order = np.random.default_rng(0).permutation(len(x))
    fit = torch.from_numpy(x[order[:fit_n]])
    held = torch.from_numpy(x[order[fit_n:fit_n + 50_000]])
    c = kmeans(fit, k)
    r_fit = (fit - c[assign(fit, c)]).numpy()
    r_held = (held - c[assign(held, c)]).numpy()
    scale = np.sqrt((r_fit ** 2).mean(0) + 1e-12)
    energy = (r_held ** 2).sum(1).mean()
    sample = (r_fit / scale).ravel()[:: max(1, r_fit.size // (1 << 20))]
    print(f"{len(x)} tokens; {k} centroids on {fit_n}; held-out residual energy {energy:.4f}")
    for bits in (1, 2, 4):
        row = []
        for name, fitter in (("equal quantiles", equal_quantiles), ("Lloyd-Max", lloyd_max)):
            cutoffs, weights = fitter(sample, bits)
            decoded = weights[np.searchsorted(cutoffs, r_held / scale, side="right")] * scale
            row.append(f"{name} {((r_held - decoded) ** 2).sum(1).mean() / energy:.4f}")
        print(f"{bits} bit(s): squared error / energy: " + ", ".join(row))


if __name__ == "__main__":
    main()
