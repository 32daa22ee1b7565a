"""Starting and stopping the `cellar serve` processes the tests talk to (loopback only)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a server may take to say it listens.
START_TIMEOUT_S = 120


def cellar_binary() -> Path:
    """The `cellar` binary: $CELLAR_BIN, else the newest of target/{debug,release}/cellar."""
    if os.environ.get("CELLAR_BIN"):
        return Path(os.environ["CELLAR_BIN"])
    built = [p for p in (ROOT / "target/debug/cellar", ROOT / "target/release/cellar") if p.is_file()]
    if not built:
        pytest.fail("no cellar binary: run `cargo build -p cellar-cli` (or set CELLAR_BIN)", pytrace=False)
    return max(built, key=lambda p: p.stat().st_mtime)


def start(command: list[str], log: Path, env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Runs `command` (`cellar serve ... --bind 127.0.0.1:0`) with its output in the file `log`
    (so a chatty server never blocks on a full pipe), and returns it with the URL it says it
    listens on; the test fails, the process killed, if it does not within START_TIMEOUT_S."""
    with open(log, "wb") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and server.poll() is None:
        found = re.search(r"listening on (http://\S+)", log.read_text(errors="replace"))
        if found:
            return server, found.group(1)
        time.sleep(0.05)
    server.kill()
    server.wait(timeout=30)
    pytest.fail(f"`{' '.join(command)}` did not start (exit {server.poll()}):\n{log.read_text()[-2000:]}", pytrace=False)


def stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then wait for the exit (bounded)."""
    server.terminate()
    server.wait(timeout=30)


@contextmanager
def serving(command: list[str], log: Path, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """[`start`] for the length of a `with` block: its URL."""
    server, url = start(command, log, env)
    try:
        yield url
    finally:
        stop(server)
