"""Medians of `bench/kernels-ab.sh` rows: pairs/s per (codec, dim, level, query tokens), old and
new, and new / old. Reads the script's output on stdin; prints a markdown table."""
import statistics
import sys
from collections import defaultdict

rates = defaultdict(list)
cpu = ""
for line in sys.stdin:
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        continue
    head, _, row = line.partition(" |")
    parts = head.split()
    if len(parts) != 3 or not row:
        continue
    side, nq = parts[0], parts[1].removeprefix("nq=")
    cells = [c.strip() for c in ("|" + row).strip().strip("|").split("|")]
    codec, dim, level, rate = cells[0], int(cells[1]), cells[2], float(cells[3])
    rates[(codec, dim, level, int(nq), side)].append(rate)

print(f"CPU: {cpu}\n")
print("| codec | dim | level | query tokens | old pairs/s (median) | new pairs/s (median) | new / old | rounds |")
print("|---|---|---|---|---|---|---|---|")
for key in sorted({k[:4] for k in rates}):
    old, new = rates.get(key + ("old",), []), rates.get(key + ("new",), [])
    if not old or not new or key[2] == "scalar":
        continue
    mo, mn = statistics.median(old), statistics.median(new)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {mo:.3e} | {mn:.3e} | {mn / mo:.2f}x | {len(old)} |")
