"""Model-facing sentences are written only in `jr2ray.menu.texts`; callers pass facts, never words.

The scan reads the source of the layers that place texts (authoring, menu, run, harness). A call of a `texts`
function, or a transcript `Message`, whose argument is a sentence (an f-string or a literal with a space) means a
wording crept back outside texts.py, as it once did in working.py and turn.py.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from jr2ray import define_event
from jr2ray.authoring import BadArguments
from jr2ray.menu import texts

ROOT = Path(__file__).resolve().parents[2] / "jr2ray"
PLACERS = [p for d in ("authoring", "menu", "run", "harness") for p in sorted((ROOT / d).rglob("*.py"))
           if p.name != "texts.py"]


def _is_sentence(node: ast.expr) -> bool:
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value


def _worded_calls(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        to_texts = isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "texts"
        message = isinstance(fn, ast.Name) and fn.id == "Message"
        args = [*node.args, *(k.value for k in node.keywords if to_texts or k.arg == "content")]
        if (to_texts or message) and any(_is_sentence(a) for a in args):
            lines.append(node.lineno)
    return lines


def test_no_caller_words_a_model_facing_text() -> None:
    found = {str(p.relative_to(ROOT)): lines for p in PLACERS if (lines := _worded_calls(ast.parse(p.read_text())))}
    assert found == {}


def test_the_scan_sees_a_worded_call() -> None:
    snippet = 'texts.bad_working_args("read_file", "\'path\' must be a string")\nMessage(content=f"hi {x}")'
    assert _worded_calls(ast.parse(snippet)) == [1, 2]


class Note(BaseModel):
    text: str
    count: int = 1


NOTE = define_event(name="note", description="Write a note.", input=Note)


@pytest.mark.parametrize("args,problem,detail", [
    ([1], "not_object", "the arguments of 'note' must be a JSON object, got list"),
    ({"text": "a", "sender": {"id": "w"}}, "sender", "'sender' is written by jr2ray; no party may send it"),
    ({"text": "a", "colour": 1, "b": 2}, "unknown", "unknown argument(s) for 'note': b, colour"),
    ({"text": 3}, "invalid", "invalid arguments for 'note': text: Input should be a valid string"),
])
def test_bad_arguments_carry_facts_and_texts_words_them(args: Any, problem: str, detail: str) -> None:
    with pytest.raises(BadArguments) as caught:
        NOTE.validate(args)
    assert caught.value.problem == problem and caught.value.event == "note"
    assert texts.bad_arguments(caught.value) == detail


def test_the_sender_refusal_has_one_wording() -> None:
    """The model's receipt detail and the Run's refusal of a Gate body read the same sentence."""
    with pytest.raises(BadArguments) as caught:
        NOTE.validate({"text": "a", "sender": None})
    assert texts.bad_arguments(caught.value) == texts.sender_refused()
    run_layer = "".join((ROOT / "run" / name).read_text() for name in ("engine.py", "gates.py"))  # Gates live there
    assert "texts.sender_refused()" in run_layer and "written by jr2ray" not in run_layer


def test_harness_texts_for_bad_json_and_working_args() -> None:
    assert texts.bad_json_syntax("ask", "Expecting value", 0) == texts.bad_json("ask", "Expecting value at position 0")
    assert "(got a JSON list)" in texts.bad_json_type("ask", "list")
    assert texts.bad_working_args("list_dir", "path_type") == (
        "list_dir was not run: 'path' must be a string. Fix the arguments and call it again.")
    assert texts.os_failure("read_file", "PermissionError", "Permission denied") == (
        "read_file failed: PermissionError: Permission denied")
