"""Each shared shape is declared once: the Turn (`TurnSpec`), the `Workspace` and the `Thinking` Dial.

The scan reads the source (no imports), so it also covers modules that need Ray or FastAPI. It would catch a
hand-copied Turn model, a `thinking: str | None` that drifts from the Dial's type, or a re-typed workspace Literal.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jr2ray.authoring.actors import TURN_INPUT_KEYS, agent
from jr2ray.authoring.models import WORKSPACES, Thinking, Workspace
from jr2ray.harness.spec import TurnSpec as HarnessTurnSpec
from jr2ray.run.models import TurnSpec

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "jr2ray").rglob("*.py"), *(ROOT / "serve").rglob("*.py")])
ALIASES = {"thinking": "Thinking", "workspace": "Workspace"}
HOME = ROOT / "jr2ray" / "authoring" / "models.py"


def annotated_names(tree: ast.AST) -> Iterator[tuple[str, ast.expr | None, int]]:
    """Every class field and function parameter with its annotation (None when unannotated)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    yield item.target.id, item.annotation, item.lineno
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                yield arg.arg, arg.annotation, arg.lineno


def test_every_thinking_and_workspace_is_typed_by_the_one_alias() -> None:
    drifted = []
    for path in SOURCES:
        for name, ann, line in annotated_names(ast.parse(path.read_text(), str(path))):
            if name in ALIASES and ann is not None and ast.unparse(ann) != ALIASES[name]:
                drifted.append(f"{path.relative_to(ROOT)}:{line}: {name}: {ast.unparse(ann)}")
    assert drifted == []


def test_the_workspace_literal_is_written_once() -> None:
    """No other Literal names the workspace modes, not even a subset such as `Literal["read", "write"]`."""
    modes = set(WORKSPACES) - {"none"}
    written = [str(p.relative_to(ROOT)) for p in SOURCES
               if any(isinstance(n, ast.Subscript) and ast.unparse(n.value).endswith("Literal")
                      and modes <= {c.value for c in ast.walk(n.slice) if isinstance(c, ast.Constant)}
                      for n in ast.walk(ast.parse(p.read_text())))]
    assert written == [str(HOME.relative_to(ROOT))]


def test_the_turn_is_declared_once() -> None:
    """Only `TurnSpec` declares a Turn's prompt; the Harness's name for it is the same class, not a copy."""
    declaring = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name) and i.target.id == "prompt"
                    for i in node.body):
                declaring.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert declaring == ["jr2ray/run/models.py:TurnSpec"]
    assert HarnessTurnSpec is TurnSpec


def test_the_turn_input_keys_are_turn_fields() -> None:
    """Every key an author may put in a Turn's input is a field of the one Turn model, by its wire name."""
    wire = {f.alias or name for name, f in TurnSpec.model_fields.items()}
    assert TURN_INPUT_KEYS <= wire


def test_the_aliases_are_the_ones_the_models_use() -> None:
    assert TurnSpec.model_fields["thinking"].annotation == Thinking
    assert TurnSpec.model_fields["workspace"].annotation == Workspace


async def test_a_bad_dial_is_an_invoke_error_and_starts_no_turn() -> None:
    """`thinking` has one type now, so a value outside it is refused when the Turn would start, with the state."""
    from jr2ray import LocalRun, agent, assign, define_event, jr2_setup

    done = define_event(name="done", description="Finish.")
    m = jr2_setup(events=[done], actors={"w": agent(model="local/tiny", instructions="Work.")}).create_machine({
        "id": "x", "initial": "work", "context": {"why": None}, "states": {
            "work": {"invoke": {"src": "w", "input": {"prompt": "Go.", "thinking": "maximum"},
                                "onError": {"target": "failed", "actions": assign({"why": lambda event: event.error})}},
                     "on": {"done": "ok"}},
            "ok": {"type": "final"},
            "failed": {"type": "final"}}})
    run = LocalRun(m)
    await run.wait(10)
    assert run.value == "failed" and run.engine.turns == {}
    assert run.context["why"] == {"message": "x.work: bad Turn input: thinking"}


@pytest.mark.parametrize("thinking", ["maximum", 1.5, [1]])
def test_a_bad_thinking_dial_is_refused_at_load(thinking: Any) -> None:
    with pytest.raises(ValueError, match="thinking must be"):
        agent(model="local/tiny", instructions="Work.", thinking=thinking)


@pytest.mark.parametrize("thinking", [None, False, True, 2048, "low", "high"])
def test_every_thinking_value_the_dial_declares_loads(thinking: Any) -> None:
    assert agent(model="local/tiny", instructions="Work.", thinking=thinking).thinking == thinking
