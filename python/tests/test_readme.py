"""Every command and code block of `README.md` and `python/README.md` runs, in order, on the test
collection (`topics.py`) standing in for SciFact.

A block's info string says how it is checked:
- ```` ```sh setup ````: the set-up commands; each line is `make <target>`, and `make -n <target>`
  must succeed (running them here would run this suite inside itself);
- ```` ```sh ````: each command runs with bash in a scratch folder laid out like the checkout
  (`bench/work/scifact` is the test index, `../shared/data/scifact` the test collection), with
  `cellar` on the PATH; it must exit 0. A command ending in `&` (the server) runs in the
  background until the file's blocks are done;
- ```` ```python ````: the file's Python blocks run one after another in one namespace, in that
  folder.
Any other info string (``text``, ``json``) is not code. `/tmp/` in a block is the scratch folder's
own, and port 7700 a free one.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import cellar_binary, start, stop

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```([A-Za-z]*)([^\n]*)\n(.*?)^```", re.S | re.M)
#: Seconds one command may run (a tiny collection: seconds are enough).
COMMAND_TIMEOUT_S = 240


def blocks(path: Path) -> list[tuple[str, str, str]]:
    """`(language, the rest of the info string, code)` of every fenced block, in order."""
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(path.read_text())]


def commands(code: str) -> list[str]:
    """Shell commands of a block: continuation lines joined, comments and blank lines dropped."""
    out: list[str] = []
    for line in code.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def checkout(tmp_path: Path, collection: Path, index_dir: Path) -> Iterator[Path]:
    """A scratch folder laid out as the README expects: `work/` is the checkout (holding
    `bench/work/scifact`), `shared/data/scifact` beside it; `cellar` on the PATH."""
    work = tmp_path / "work"
    shutil.copytree(index_dir, work / "bench" / "work" / "scifact")
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "scifact").symlink_to(collection)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cellar").symlink_to(cellar_binary())
    (tmp_path / "tmp").mkdir()
    yield work


def substitute(code: str, tmp: Path, port: int) -> str:
    return code.replace("/tmp/", f"{tmp}/tmp/").replace("7700", str(port))


def run_file(readme: Path, work: Path) -> list[str]:
    """Runs every block of `readme` in `work`; returns what each shell command printed."""
    tmp = work.parent
    port = free_port()
    env = {**os.environ, "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}"}
    namespace: dict[str, object] = {"__name__": "__readme__"}
    background: list[subprocess.Popen[bytes]] = []
    printed: list[str] = []
    cwd = Path.cwd()
    os.chdir(work)
    try:
        for language, info, code in blocks(readme):
            code = substitute(code, tmp, port)
            if language == "sh" and info == "setup":
                for command in commands(code):
                    words = shlex.split(command.split("#")[0])
                    assert words[0] == "make" and len(words) == 2, f"{readme.name}: a set-up command is `make <target>`: {command}"
                    dry = subprocess.run(["make", "-n", words[1]], cwd=ROOT, capture_output=True, text=True, timeout=60)
                    assert dry.returncode == 0, f"{readme.name}: `make -n {words[1]}` failed: {dry.stderr}"
            elif language == "sh":
                for command in commands(code):
                    if command.endswith("&"):
                        log = tmp / f"background-{len(background)}.log"
                        background.append(start(["bash", "-c", f"exec {command[:-1]}"], log, env)[0])
                        continue
                    done = subprocess.run(
                        ["bash", "-c", f"set -o pipefail; {command}"],
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=COMMAND_TIMEOUT_S,
                    )
                    assert done.returncode == 0, f"{readme.name}: `{command}` exited {done.returncode}: {done.stderr}"
                    printed.append(done.stdout)
            elif language == "python":
                exec(compile(code, f"{readme.name} block", "exec"), namespace)
    finally:
        os.chdir(cwd)
        for process in background:
            stop(process)
    return printed


def test_the_readme_runs(checkout: Path) -> None:
    printed = run_file(ROOT / "README.md", checkout)
    # The first search printed hits; the server answered JSON hits.
    assert printed[0].strip(), "cellar search printed nothing"
    assert any('"hits"' in out for out in printed), printed


def test_the_python_readme_runs(checkout: Path) -> None:
    run_file(ROOT / "python" / "README.md", checkout)


def test_every_fence_is_checked_or_plainly_not_code() -> None:
    for readme in (ROOT / "README.md", ROOT / "python" / "README.md"):
        for language, info, _ in blocks(readme):
            assert (language, info) in {("sh", ""), ("sh", "setup"), ("python", ""), ("text", ""), ("json", "")}, (
                f"{readme.name}: a ```{language} {info} block: say sh, sh setup or python (checked) or text/json"
            )
