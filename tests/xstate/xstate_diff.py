"""Compare one case step by step between xstate (runner.mjs) and jr2ray (xstate_jr2ray), and explain a failure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from xstate_jr2ray import run_case
from xstate_node import XstateRunner
from xstate_shrink import shrink


@dataclass
class Outcome:
    """What one case gave: agreement counts, or the first disagreement."""

    steps: int = 0
    probes: int = 0
    kind: str | None = None  # None (agree) | "diff" | "fatal" (xstate refused) | "jr2ray" (jr2ray raised)
    at: int = -1
    xstate: Any = None
    jr2ray: Any = None

    @property
    def failed(self) -> bool:
        return self.kind is not None


def run_mine(case: dict[str, Any]) -> list[dict[str, Any]] | Exception:
    try:
        return run_case(case)
    except Exception as exc:  # a chart xstate runs but jr2ray refuses or crashes on
        return exc


def judge(case: dict[str, Any], xres: dict[str, Any], mine: list[dict[str, Any]] | Exception | None = None
          ) -> Outcome:
    """Compare xstate's records with jr2ray's (computed here unless given)."""
    if "fatal" in xres:
        return Outcome(kind="fatal", xstate=xres["fatal"])
    if mine is None:
        mine = run_mine(case)
    if isinstance(mine, Exception):
        return Outcome(kind="jr2ray", jr2ray=repr(mine))
    theirs = [{k: v for k, v in r.items() if k != "note"} for r in xres["steps"]]
    out = Outcome()
    for i in range(max(len(theirs), len(mine))):
        a = theirs[i] if i < len(theirs) else None
        b = mine[i] if i < len(mine) else None
        if a != b:
            return Outcome(out.steps, out.probes, "diff", i, xres["steps"][i] if a is not None else None, b)
        out.steps += 1
        out.probes += len(a.get("can") or [])
    return out


def still_fails_like(runner: XstateRunner, kind: str) -> Any:
    def check(case: dict[str, Any]) -> bool:
        return judge(case, runner.run(case)).kind == kind
    return check


def minimal(runner: XstateRunner, case: dict[str, Any], outcome: Outcome) -> tuple[dict[str, Any], Outcome, int]:
    """Shrink a failing case; keep only the steps up to the first difference first."""
    if outcome.kind == "diff":
        case = {**case, "steps": case["steps"][:max(outcome.at, 0)]}
    small, tries = shrink(case, still_fails_like(runner, str(outcome.kind)))
    return small, judge(small, runner.run(small)), tries


def _tree(node: dict[str, Any], depth: int = 0) -> list[str]:
    """One line of compact JSON per state, children indented: small enough to read, exact enough to paste."""
    own = {k: v for k, v in node.items() if k != "states" and v not in (None, [], {})}
    lines = ["  " * depth + json.dumps(own, separators=(",", ":"))]
    for child in node.get("states") or []:
        lines += _tree(child, depth + 1)
    return lines


def explain(case: dict[str, Any], outcome: Outcome) -> str:
    head = {k: v for k, v in case["chart"].items() if k != "root"}
    lines = ["chart: " + json.dumps(head), *_tree(case["chart"]["root"], 1), "steps: " + json.dumps(case["steps"]),
             "probes: " + json.dumps(case["probes"])]
    if outcome.kind == "diff":
        lines += [f"first difference at record {outcome.at} (0 = after start, i = after step i):",
                  "  xstate: " + json.dumps(outcome.xstate), "  jr2ray: " + json.dumps(outcome.jr2ray)]
    elif outcome.kind == "fatal":
        lines.append("xstate refused the chart: " + str(outcome.xstate)[:600])
    else:
        lines.append("jr2ray raised: " + str(outcome.jr2ray)[:600])
    return "\n".join(lines)
