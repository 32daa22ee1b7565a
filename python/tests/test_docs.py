"""No public name of the `cellar` package is undocumented, and its stubs match the runtime."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
import subprocess
import sys


import cellar
import cellar.cluster


def undocumented(module: object, names: list[str]) -> list[str]:
    missing = []
    for name in names:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj) or callable(obj):
            if not (obj.__doc__ or "").strip():
                missing.append(name)
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                doc = getattr(value, "__doc__", None)
                if isinstance(value, (staticmethod, classmethod)):
                    doc = value.__func__.__doc__
                # Class constants (an exception's `code`) are documented by their class.
                if value is None or isinstance(value, (str, int, float, tuple, Mapping)):
                    continue
                if not (doc or "").strip():
                    missing.append(f"{name}.{attr}")
    return missing


def test_every_public_name_has_a_docstring() -> None:
    assert undocumented(cellar, list(cellar.__all__)) == []
    assert undocumented(cellar.cluster, [n for n in cellar.cluster.__all__]) == []


def test_the_package_exports_every_exception() -> None:
    from cellar import _errors

    assert set(_errors.__all__) <= set(cellar.__all__)


def test_the_stubs_match_the_runtime() -> None:
    """`mypy.stubtest` of the native module: every name, argument and default of its stub
    (`_cellar.pyi`) is the runtime's. The pure-Python modules are their own stubs; checking them
    too would type-check Ray (45 s more) for nothing."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "cellar._cellar", "--ignore-disjoint-bases"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
