# P95 latency against offered QPS, one line per configuration (log y): run by `cellar-bench load` as
# python3 -c SCRIPT REPORT.json OUT.png
import json
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
except ImportError as e:
    sys.stderr.write(f"matplotlib is not installed ({e})\n")
    sys.exit(3)

src, dst = sys.argv[1], sys.argv[2]
with open(src) as f:
    report = json.load(f)

fig, ax = plt.subplots(figsize=(8, 5))
levels = sorted(report["settings"]["qps"])
drawn = 0
missing = []
all_p95 = []
for cfg in report["configurations"]:
    points = [
        (lv["offered_qps"], lv["latency"]["p95_ms"])
        for lv in cfg.get("levels", [])
        if lv.get("latency")
    ]
    if not points:
        missing.append(f"{cfg['name']} ({cfg.get('status', 'no data')})")
        continue
    all_p95 += [p for _, p in points]
    xs, ys = zip(*points)
    line, = ax.plot(xs, ys, marker="o", label=cfg["name"])
    # Mark levels past saturation with a hollow marker.
    sat = [(lv["offered_qps"], lv["latency"]["p95_ms"]) for lv in cfg["levels"] if lv.get("latency") and lv.get("saturated")]
    if sat:
        ax.plot(*zip(*sat), linestyle="none", marker="o", markersize=11, markerfacecolor="none", color=line.get_color())
    drawn += 1

ax.set_yscale("log")
plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
ax.yaxis.set_major_formatter(plain)
if all_p95 and max(all_p95) / max(min(all_p95), 1e-9) < 10:
    ax.yaxis.set_minor_formatter(plain)
else:
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
if levels and levels[-1] / max(levels[0], 1e-9) >= 8:
    ax.set_xscale("log")
    ax.set_xticks(levels)
    ax.set_xticklabels([f"{q:g}" for q in levels])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
ax.set_xlabel("offered load (queries/s, Poisson arrivals)")
ax.set_ylabel("P95 latency (ms, from scheduled send time)")
ax.set_title(f"cellar-bench load: P95 vs offered load ({report['settings']['mode']}, {report['cores']} cores)")
ax.grid(True, which="both", alpha=0.3)
if drawn:
    ax.legend(title="configuration (circled: saturated)")
else:
    ax.text(0.5, 0.5, "no level completed a request", ha="center", va="center", transform=ax.transAxes)
if missing:
    ax.text(0.99, 0.01, "not drawn: " + ", ".join(missing), ha="right", va="bottom", fontsize=8,
            transform=ax.transAxes)
fig.tight_layout()
fig.savefig(dst, dpi=120)
