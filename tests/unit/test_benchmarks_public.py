"""Benchmarks call only public names: a figure reached through a private field is not the product's. Every
benchmark is read as Python source: no `x._name` on anything but the script's own `self`/`cls`, no import of a
private name or module, and none of the handle fields an old benchmark set by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.rglob("*.py"))  # the packages under it too (benchmarks/prefix_cache)
HAND_SET = {"starting", "host"}  # handle fields a script once set to reach a figure (runs_scale before)


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def private_uses(source: str) -> list[str]:
    """Where `source` reaches a private name, as `line: what`."""
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if _private(node.attr) and owner not in ("self", "cls"):
                found.append(f"{node.lineno}: .{node.attr}")
            if node.attr in HAND_SET and isinstance(node.ctx, ast.Store) and owner not in ("self", "cls"):
                found.append(f"{node.lineno}: sets .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            found.append(f"{node.lineno}: {node.func.id} {node.args[1].value}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if any(_private(part) for part in module.split(".")):
                found.append(f"{node.lineno}: from {module}")
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if any(_private(p) for p in a.name.split("."))]
    return sorted(found)


def test_the_checker_finds_what_it_must() -> None:
    bad = ("import ray._private\nfrom jr2ray.run import _x\nh._call()\nh.starting = 1\nself._ok()\nx.__name__\n"
           "getattr(h, '_host')\ngetattr(m, '__version__', '?')\n")
    assert private_uses(bad) == ["1: import ray._private", "2: import _x", "3: ._call", "4: sets .starting",
                                 "7: getattr _host"]
    assert private_uses("from __future__ import annotations\nx.__dict__\n") == []


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_a_benchmark_uses_public_names_only(script: Path) -> None:
    assert private_uses(script.read_text()) == [], f"{script.name} reaches private names"
