"""Settings are read once, where a process (or an actor) starts, and passed down from there: every call of
`load_settings()` in the product sits in one of the entry points below. A call anywhere else fails this test, naming
its file, line and function, so a deep fallback (`settings or load_settings()`) cannot come back unseen.

The entry points, and why each reads the settings itself:
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jr2ray", "serve", "workflows")

ENTRY_POINTS: dict[str, str] = {
    # the command line: flags over the environment, once per command
    "jr2ray.cli.main.load": "the CLI reads them once, with its flags, and hands `args.settings` to every command",
    # a driver script
    "jr2ray.run.client.connect": "the driver's entry point: `jr2ray.connect()` with no settings given",
    "jr2ray.run.client.Client.__init__": "a Client made without connect(): the API replica's, or a script's",
    "jr2ray.run.local.LocalRun.__init__": "the in-process driver's entry point (a run with no Ray)",
    # actor constructors: a fresh process, its env just applied
    "jr2ray.run.actor.RunActor.__init__": "a Run actor, after its env is applied",
    "jr2ray.run.host.HostSlot.__init__": "a live run's place in a pooled host actor, made in its constructor",
    "jr2ray.run.host.HostSlot.adopt": "a pooled host's first run starts here: read once that run's env is applied",
    "jr2ray.run.registry.RunRegistry.__init__": "the registry actor",
    "jr2ray.run.timers.TimerService.__init__": "the timer service actor",
    "jr2ray.harness.actor.HarnessActorImpl.__init__": "a Harness actor started with no provider config",
    "jr2ray.harness.launcher.RayTurnLauncher.__init__": "built by a Run actor (load_launcher) in its process, its env "
                                                        "applied: the Run layer cannot name the Harness's config",
    # Serve: the replica's config and app factory, and the proxy's start callback, each in its own process
    "serve.api.config.ApiConfig.from_settings": "the API replica's config, built in the replica",
    "serve.api.app.build_app": "the API's app factory fills what a hand-built config left out",
    "serve.api.proxy.proxy_middlewares": "Serve's proxy calls it at start, in the proxy's process",
    "serve.llm.builders.build_app": "the LLM app's builder: Serve's loader calls it with the app's args alone",
    # commands of their own (`python -m ...`): a process starts there; `jr2ray bench`/`demo`/`model` get the CLI's
    "serve.llm.__main__.main": "`python -m serve.llm`: deploys the LLM app from its own process",
    "jr2ray.demo.main": "`python -m jr2ray.demo`",
    "jr2ray.tinymodel.main": "`python -m jr2ray.tinymodel` with no output dir: the home's model dir",
    # the settings module itself
    "jr2ray.settings.workflow_modules": "the catalog's hot path re-reads only JR2RAY_WORKFLOWS, cached, because a "
                                        "pooled host applies each adopted run's env (its own workflow modules)",
    # workflow modules read their models and drivers when a Run actor imports them, after its env is applied
    "workflows.coder": "a workflow module, read at import in the Run actor",
    "workflows.deploy": "a workflow module, read at import in the Run actor",
    "workflows.notes": "a workflow module, read at import in the Run actor",
}


def _calls(path: Path, module: str) -> list[tuple[str, int]]:
    """(qualified name of the enclosing function, or the module for a top-level call; line) of each
    `load_settings(...)` call in one file."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call):
                f = child.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name == "load_settings":
                    found.append((".".join([module, *scope]), child.lineno))
            visit(child, scope)

    visit(ast.parse(path.read_text(), str(path)), [])
    return found


def _all_calls() -> list[tuple[str, str, int]]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
            out += [(where, str(path.relative_to(ROOT)), line) for where, line in _calls(path, ".".join(parts))]
    return out


def test_load_settings_is_called_only_at_entry_points() -> None:
    stray = [f"{file}:{line} in {where}" for where, file, line in _all_calls() if where not in ENTRY_POINTS]
    assert not stray, ("load_settings() called outside an entry point (take the caller's settings instead, or add "
                       "a justified entry to ENTRY_POINTS):\n" + "\n".join(stray))


def test_every_entry_point_still_reads_the_settings() -> None:
    """The list stays short: an entry that no longer calls load_settings() is dropped from it."""
    seen = {where for where, _, _ in _all_calls()}
    assert sorted(ENTRY_POINTS.keys() - seen) == []


def test_a_deep_fallback_is_caught(tmp_path: Path) -> None:
    """The check itself: a `settings or load_settings()` in a helper is found, one in an allowed place is not."""
    src = tmp_path / "m.py"
    src.write_text("from jr2ray.settings import load_settings\n\n"
                   "class A:\n    def __init__(self, s=None):\n        self.s = s or load_settings()\n\n"
                   "def helper(s=None):\n    return (s or load_settings()).home\n")
    assert _calls(src, "pkg.m") == [("pkg.m.A.__init__", 5), ("pkg.m.helper", 8)]
