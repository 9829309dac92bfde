"""The scripted trajectories the bench replays: per workflow and profile, the assistant's tool calls in order.

Why scripted: the arms must do the same work. A random-weight model never walks the same path twice, so each arm
used to run its own conversation (2 to 7 requests, several ending in `error`). Here one plan per workflow is recorded
once through the Harness (the tool results are the Run's real receipts and the Working tools' real output), and then
every arm replays exactly those calls. The people at the Gates answer the same way every time.

A plan is a list of steps; each step is the calls of one model answer. The `long` coder plan reads many long files,
so its conversation passes 30 requests and 20,000 prompt tokens, like the anchor's 24.8k-token history.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jr2ray.run import LocalRun

PROFILES = ("quick", "long")


class PlannedCall(BaseModel):
    """One tool call of the script: a pick or a Working tool, with its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    args: dict[str, Any] = Field(default_factory=dict)

    def arguments(self) -> str:
        """The call's raw arguments text, byte-identical in every arm."""
        return json.dumps(self.args, ensure_ascii=False)


class Plan(BaseModel):
    """What one workflow's replay does: its door input, its workspace files, and the answers in order."""

    workflow: str
    profile: str
    door: dict[str, Any]
    files: dict[str, str] = Field(default_factory=dict, description="Seeded into the coder's workspace per arm.")
    steps: list[list[PlannedCall]]


def _c(name: str, **args: Any) -> list[PlannedCall]:
    return [PlannedCall(name=name, args=args)]


_WORDS = ("state turn pick menu gate event agent tool call value result answer change draft test build "
          "file path line name list object string number field request reply notes version release").split()


def _module(index: int, lines: int) -> str:
    """A long, deterministic, source-like file: what a coder reads in a real repository."""
    out = [f'"""Module {index}: helpers for the {_WORDS[index % len(_WORDS)]} {_WORDS[(index * 7) % len(_WORDS)]}."""',
           ""]
    for k in range(lines):
        a, b, c = (_WORDS[(index * 31 + k * j) % len(_WORDS)] for j in (3, 5, 11))
        if k % 6 == 0:
            out.append(f"\n\ndef {a}_{b}_{k}({c}: str, {b}: int = {k}) -> dict[str, object]:")
            out.append(f'    """Return the {a} of each {b} for the {c}, in order."""')
        out.append(f"    {a}_{k} = {{\"{b}\": {c}, \"{a}\": {b} + {k}, \"{c}\": [{k}, {index}]}}")
    out.append(f"    return {{\"{_WORDS[index % len(_WORDS)]}\": {lines}}}")
    return "\n".join(out) + "\n"


def notes_plan(profile: str) -> Plan:
    asks = 2 if profile == "quick" else 6
    steps = [_c("ask", question=f"Question {k + 1}: should the crash fix lead the notes?") for k in range(asks)]
    steps.append(_c("done", notes="## Fixes\n- Crash on empty input.\n## Features\n- Dark mode.\n- Faster start."))
    return Plan(workflow="notes", profile=profile, steps=steps,
                door={"changes": "fix: crash on empty input\nfeat: dark mode\nperf: faster start"})


def coder_plan(profile: str) -> Plan:
    """Implement, a review that asks for changes, then the fix on the same conversation (continue)."""
    n_files, lines = (3, 12) if profile == "quick" else (22, 18)
    files = {f"src/mod{k:02d}.py": _module(k, lines) for k in range(n_files)}
    files["README.md"] = "A small tool. Run it with `python -m tool`.\n"
    steps = [_c("list_dir", path="."), _c("list_dir", path="src")]
    steps += [_c("read_file", path=p) for p in sorted(files) if p.startswith("src/")]
    steps += [_c("run_tests"),
              _c("write_file", path="src/version.py", content='VERSION = "1.0.0"\n'),
              _c("write_file", path="src/cli.py", content="import sys\n\nif '--version' in sys.argv:\n    print(1)\n"),
              _c("run_tests"),
              _c("finish", summary="Added a --version flag in src/cli.py and src/version.py.")]
    # The checker's notes open the `fix` Turn on the same conversation.
    reread = ["src/cli.py", "src/version.py"] + ([] if profile == "quick" else ["src/mod00.py", "src/mod01.py"])
    steps += [_c("read_file", path=p) for p in reread]
    steps += [_c("write_file", path="src/cli.py",
                 content="import sys\n\nfrom src.version import VERSION\n\nif '--version' in sys.argv:\n"
                         "    print(VERSION)\n"),
              _c("run_tests"),
              _c("finish", summary="The flag now prints the version to stdout.")]
    return Plan(workflow="coder", profile=profile, files=files, steps=steps,
                door={"task": "add a --version flag to the command line tool"})


def desk_plan(profile: str) -> Plan:
    """Moves across the four modes (each one changes the Allowed picks), then `close` once the goal is reached."""
    moves = ["m0_e1", "m0_e0", "m1_e0", "m2_e1"] if profile == "quick" else \
        ["m0_e1", "m0_e0", "m1_e1", "m1_e0", "m2_e1", "m2_e0", "m3_e1", "m3_e0", "m0_e3", "m0_e2"]
    steps = [_c(m, note=f"move {k + 1}") for k, m in enumerate(moves)]
    steps.append(_c("close", note="the desk is done"))
    return Plan(workflow="desk", profile=profile, steps=steps, door={"goal": len(moves)})


PLANS = {"notes": notes_plan, "coder": coder_plan, "desk": desk_plan}


def plan_for(workflow: str, profile: str) -> Plan:
    if workflow not in PLANS:
        raise ValueError(f"no scripted plan for workflow {workflow!r} (have {', '.join(PLANS)})")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (have {', '.join(PROFILES)})")
    return PLANS[workflow](profile)


def load_machine(workflow: str) -> Any:
    if workflow == "notes":
        from workflows.notes import machine

        return machine
    if workflow == "coder":
        from workflows.coder import machine

        return machine
    from jr2ray.bench.desk import build

    return build()


def seed_workspace(home: Path, run_id: str, files: dict[str, str]) -> None:
    """Write the plan's files into the run's workspace before its first Turn (the engine's own directory under
    `home`, the caller's settings' home: the run is made with the same settings)."""
    root = home / "workspaces" / run_id
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


async def drive_gates(run: LocalRun, stop: asyncio.Event) -> None:
    """The people: the editor replies to every question; the checker asks for changes once, then approves."""
    reviews = 0
    while not stop.is_set():
        for g in run.gates():
            if "reply" in g.accepts_now:
                run.send(g.id, "reply", {"text": "Lead with the crash fix."})
            elif "request_changes" in g.accepts_now:
                if reviews == 0:
                    run.send(g.id, "request_changes", {"notes": "print the version to stdout"})
                else:
                    run.send(g.id, "approve", {})
                reviews += 1
        await asyncio.sleep(0.02)
