"""Issue 13.8: the fixed footprint of a server that holds its model, binary against binary.

Each binary's `cellar serve` starts in a memory cgroup of its own (v1, a child of this process's
one; no limit), on one index, and answers 16 text queries it encodes itself; then this records
the server's peak RSS (VmHWM), its RSS split into anonymous memory (what a cap cannot reclaim)
and file pages, and the cgroup's peak and current charge (page cache counted, as a cap counts
it). Runs alternate between the binaries, ROUNDS times each.

Re-run (after building both binaries):
  python3 bench/model_footprint.py --index DIR --queries Q.jsonl \
      --bin before=/path/to/old/cellar --bin after=./target/release/cellar \
      --out bench/results/model-footprint
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROUNDS = 3
QUERIES = 16


def own_memory_cgroup():
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.strip().split(":", 2)
        if "memory" in controllers.split(","):
            return os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
    sys.exit("model_footprint: no cgroup v1 memory controller for this process")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid, field):
    text = open(f"/proc/{pid}/status").read()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.M).group(1))


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/search", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def measure(name, binary, index, queries, n):
    cg = os.path.join(own_memory_cgroup(), f"cellar-footprint-{os.getpid()}-{n}")
    os.makedirs(cg, exist_ok=True)
    port = free_port()

    def join():
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    log = open(f"/tmp/model-footprint-{os.getpid()}-{n}.log", "w")
    proc = subprocess.Popen([binary, "serve", "--index", index, "--reader", "direct",
                             "--bind", f"127.0.0.1:{port}"], preexec_fn=join, stdout=log, stderr=log)
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    sys.exit(f"model_footprint: {name} did not come up (see {log.name})")
                time.sleep(0.2)
        started_rss = status_kib(proc.pid, "VmRSS")
        hits = []
        for q in queries[:QUERIES]:
            hits.append([h["id"] for h in post(port, {"query": q, "k": 10, "mode": "hybrid"})["hits"]])
        row = {
            "binary": name,
            "peak_rss_mib": status_kib(proc.pid, "VmHWM") / 1024,
            "rss_after_start_mib": started_rss / 1024,
            "rss_mib": status_kib(proc.pid, "VmRSS") / 1024,
            "anon_mib": status_kib(proc.pid, "RssAnon") / 1024,
            "file_mib": status_kib(proc.pid, "RssFile") / 1024,
            "cgroup_peak_mib": int(open(os.path.join(cg, "memory.max_usage_in_bytes")).read()) / 2**20,
            "cgroup_now_mib": int(open(os.path.join(cg, "memory.usage_in_bytes")).read()) / 2**20,
        }
        return row, hits
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
        os.rmdir(cg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--queries", required=True, help="a BEIR queries.jsonl")
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH of a cellar binary")
    ap.add_argument("--out", required=True, help="path prefix of the .md and .json written")
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.bin]
    queries = [json.loads(line)["text"] for line in open(args.queries)]
    rows, answers = [], {}
    for r in range(ROUNDS):
        for i, (name, path) in enumerate(bins):
            row, hits = measure(name, path, args.index, queries, r * len(bins) + i)
            rows.append(row)
            answers.setdefault(name, hits)
    same = all(answers[n] == answers[bins[0][0]] for n, _ in bins)
    cpu = re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read()).group(1).strip()
    keys = ["peak_rss_mib", "rss_after_start_mib", "rss_mib", "anon_mib", "file_mib", "cgroup_peak_mib", "cgroup_now_mib"]
    lines = [
        "# The fixed footprint of a server with its model (issue 13.8)\n",
        f"Command: `python3 bench/model_footprint.py --index {args.index} --queries {args.queries} "
        + " ".join(f"--bin {n}={p}" for n, p in bins) + f" --out {args.out}`\n",
        f"Machine: {cpu}, {os.cpu_count()} cores. `cellar serve --reader direct` on the index, "
        f"{QUERIES} text queries encoded by the server (hybrid, k 10), each binary started {ROUNDS} "
        "times in turn in a memory cgroup of its own with no limit. Medians (MiB) of the runs; RSS from "
        "/proc/PID/status after the queries, cgroup charge from memory.max_usage_in_bytes / usage_in_bytes "
        "(page cache counted, as a cap counts it).\n",
        f"Same top-10 answers from every binary: {'yes' if same else 'NO'}.\n",
        "| binary | peak RSS | RSS after start | RSS after queries | anonymous | file pages | cgroup peak | cgroup now |",
        "|---|---|---|---|---|---|---|---|",
    ]
    medians = {}
    for name, _ in bins:
        mine = [r for r in rows if r["binary"] == name]
        medians[name] = {k: statistics.median(r[k] for r in mine) for k in keys}
        lines.append(f"| {name} | " + " | ".join(f"{medians[name][k]:.1f}" for k in keys) + " |")
    if len(bins) == 2:
        a, b = bins[0][0], bins[1][0]
        lines.append(f"| {b} / {a} | " + " | ".join(
            f"{medians[b][k] / medians[a][k]:.2f}x" if medians[a][k] else "-" for k in keys) + " |")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    open(args.out + ".md", "w").write(text)
    json.dump({"rows": rows, "medians": medians, "same_answers": same}, open(args.out + ".json", "w"), indent=1)
    print(text)


if __name__ == "__main__":
    main()
