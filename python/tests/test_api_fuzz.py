"""Issue 16.2: a bounded schemathesis pass over `cellar serve`'s own OpenAPI document, against a
real server (an index, a data directory and streams), asserting no 5xx, that the server is alive
after it, and that its peak RSS stays bounded. The long run is `bench/api-fuzz.sh`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import servers
from servers import cellar_binary

# Examples per operation and phase, over every operation of the OpenAPI document (26 on 2026-11-27).
MAX_EXAMPLES = 30
# The server's peak resident memory after the run, at most.
RSS_CAP_MIB = 1024


def start(args: list[str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`cellar serve ARGS`, its output (panics' backtraces included) in `log`."""
    return servers.start([str(cellar_binary()), "serve", *args], log)


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def test_schemathesis_finds_no_server_error(index_dir: Path, tmp_path: Path) -> None:
    st = shutil.which("st") or shutil.which("schemathesis")
    if st is None:
        pytest.fail("schemathesis is not installed: `make setup` installs it", pytrace=False)
    index = tmp_path / "index"
    shutil.copytree(index_dir, index, ignore=shutil.ignore_patterns("LOCK"))
    args = ["--index", str(index), "--data-dir", str(tmp_path / "data"), "--streams", str(tmp_path / "streams")]
    log = tmp_path / "serve.log"
    server, url = start([*args, "--bind", "127.0.0.1:0", "--workers", "2"], log)
    try:
        run = subprocess.run(
            [st, "run", f"{url}/openapi.json", "--checks", "not_a_server_error", "--max-examples", str(MAX_EXAMPLES),
             "--seed", "16", "--workers", "1", "--no-color", "--request-timeout", "30"],
            capture_output=True, text=True, timeout=900, cwd=tmp_path,
        )
        assert server.poll() is None, f"the server died:\n{log.read_text()[-4000:]}"
        summary = run.stdout[-3000:]
        assert run.returncode == 0, f"schemathesis found failures:\n{summary}\n--- server log ---\n{log.read_text()[-4000:]}"
        assert "generated" in summary, summary
        assert peak_rss_mib(server.pid) < RSS_CAP_MIB
    finally:
        server.terminate()
        server.wait(timeout=30)
