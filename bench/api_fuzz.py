"""The long API fuzzing run of issue 16.2: schemathesis over `cellar serve`'s own OpenAPI
document against a real server (an index, a data directory, streams), with many examples per
operation, in rounds of new seeds until the server has answered the requests asked for (its own
count). Writes bench/results/api-fuzz.{md,json}: rounds, test cases, requests served, 5xx
answers, failures, wall time, the server's peak RSS, whether it was alive after. Run by
bench/api-fuzz.sh."""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


MAX_ROUNDS = 12


def served_requests(url: str) -> tuple[int, int]:
    """(requests answered, of which 5xx) by the server's own counters."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    total = bad = 0
    for found in re.finditer(r'^cellar_requests_total\{.*status="(\d+)"\} (\d+)$', text, re.M):
        total += int(found.group(2))
        bad += int(found.group(2)) if found.group(1).startswith("5") else 0
    return total, bad


def main(binary: str, index: str, work: str, examples: int, requests: int, out: str) -> None:
    work_dir = Path(work)
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    shutil.copytree(index, work_dir / "index", ignore=shutil.ignore_patterns("LOCK"))
    log = (work_dir / "serve.log").open("w")
    server = subprocess.Popen(
        [binary, "serve", "--index", str(work_dir / "index"), "--data-dir", str(work_dir / "data"),
         "--streams", str(work_dir / "streams"), "--bind", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = None
    while url is None:
        line = server.stdout.readline()
        if not line:
            sys.exit(f"cellar serve did not start (exit {server.poll()})")
        found = re.search(r"listening on (http://\S+)", line)
        url = found.group(1) if found else None
    subprocess.Popen(["cat"], stdin=server.stdout, stdout=log)
    start = time.monotonic()
    runs, cases, failures, codes = [], 0, 0, []
    # Rounds of schemathesis with new seeds until the server has answered `requests` requests
    # (its own count, /metrics), at most `MAX_ROUNDS`: one round stops once its strategies are
    # spent, well short of 100k requests.
    for round_no in range(MAX_ROUNDS):
        seed = 16 + round_no
        command = ["st", "run", f"{url}/openapi.json", "--checks", "not_a_server_error", "--max-examples",
                   str(examples), "--seed", str(seed), "--workers", "2", "--no-color", "--request-timeout", "30"]
        run = subprocess.run(command, capture_output=True, text=True, cwd=work_dir)
        generated = re.search(r"(\d+) generated", run.stdout)
        found = re.search(r"(\d+) unique failures?", run.stdout)
        cases += int(generated.group(1)) if generated else 0
        failures += int(found.group(1)) if found else 0
        codes.append(run.returncode)
        runs.append(run)
        served = served_requests(url) if server.poll() is None else None
        print(f"round {round_no + 1} (seed {seed}): {generated.group(1) if generated else '?'} test cases, "
              f"exit {run.returncode}, server answered {served} requests so far", flush=True)
        if served is None or served[0] >= requests:
            break
    wall = time.monotonic() - start
    alive = server.poll() is None
    served = served_requests(url) if alive else None
    hwm = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{server.pid}/status").read_text()) if alive else None
    server.terminate()
    server.wait(timeout=60)
    run = runs[-1]
    report = {
        "command": " ".join(sys.argv),
        "schemathesis": " ".join(command[:2] + command[3:]).replace(f"--seed {seed}", f"--seed 16..{seed}"),
        "cpu": cpu(),
        "cores": len(__import__("os").sched_getaffinity(0)),
        "examples_per_operation": examples,
        "rounds": len(runs),
        "test_cases": cases,
        "requests_served": served[0] if served else None,
        "responses_5xx": served[1] if served else None,
        "unique_failures": failures,
        "exit_codes": codes,
        "wall_s": round(wall, 1),
        "server_alive_after": alive,
        "server_peak_rss_mib": round(int(hwm.group(1)) / 1024, 1) if hwm else None,
    }
    Path(out + ".json").write_text(json.dumps(report, indent=2) + "\n")
    summary = run.stdout[run.stdout.rfind("SUMMARY"):] if "SUMMARY" in run.stdout else run.stdout[-3000:]
    md = (
        "# API fuzzing: schemathesis over the OpenAPI document\n\n"
        f"Command: `{report['command']}` (schemathesis: `{report['schemathesis']}`)\n\n"
        f"Machine: {report['cpu']} ({report['cores']} cores), {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}.\n\n"
        "A real `cellar serve` (SciFact residual2 index, a data directory, streams) under every operation of "
        "its own `/openapi.json`: examples, coverage, fuzzing and stateful phases, the one check that no "
        "answer is a 5xx.\n\n"
        "| rounds | test cases | requests served | 5xx answers | unique failures | exit codes | wall s | "
        "server alive after | server peak RSS MiB |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        f"| {report['rounds']} | {report['test_cases']} | {report['requests_served']} | {report['responses_5xx']} | "
        f"{report['unique_failures']} | {report['exit_codes']} | {report['wall_s']} | "
        f"{report['server_alive_after']} | {report['server_peak_rss_mib']} |\n\n"
        "Requests served and 5xx answers are the server's own count (`cellar_requests_total` of /metrics). "
        "schemathesis' summary of the last round:\n\n```text\n" + summary.strip() + "\n```\n"
    )
    Path(out + ".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
