"""The model-facing texts (D11, H2, H3, H5, H8): the wording the rules fix, and byte-stability."""

from __future__ import annotations

import pytest

from jr2ray.menu import texts
from jr2ray.menu.models import Receipt

ADR_CORRECTION = (
    "finish is not allowed in the workflow's current state, whatever its arguments. Your turn is not over. "
    "Do not repeat this call — pick one of the allowed tools."
)


def receipt(**kw: object) -> Receipt:
    base: dict[str, object] = {"delivered": True, "moved": False, "turn_complete": False, "allowed": ["ask"]}
    base.update(kw)
    return Receipt(**base)  # type: ignore[arg-type]


# -- standing Briefing ---------------------------------------------------------------------------------------------


def test_briefing_is_one_block_and_byte_stable() -> None:
    b = texts.briefing()
    assert b == texts.briefing("none")
    assert b.startswith("<jr2-briefing>\n") and b.endswith("\n</jr2-briefing>")
    assert b.count("<jr2-briefing>") == 1


def test_briefing_says_how_to_read_allowed_now() -> None:
    b = texts.briefing()
    assert 'a pick counts only when the newest "Allowed now" line lists it' in b
    assert "Each answer to a pick says whether your turn is over" in b
    assert "Allowed now:" not in b  # it explains the list but never states one


def test_briefing_holds_no_digits() -> None:
    # No clock, no counters: nothing that could change between Turns.
    for ws in ("none", "read", "write"):
        body = texts.briefing(ws).removeprefix("<jr2-briefing>").removesuffix("</jr2-briefing>")  # type: ignore[arg-type]
        assert not any(ch.isdigit() for ch in body)


def test_briefing_mentions_working_tools_only_for_workspaces() -> None:
    assert "read_file" not in texts.briefing("none")
    assert "read_file" in texts.briefing("read") and "write_file" not in texts.briefing("read")
    assert "run_command" in texts.briefing("write")


def test_system_prompt_is_instructions_then_briefing() -> None:
    assert texts.system_prompt("  Be brief.\n") == "Be brief.\n\n" + texts.briefing()
    assert texts.system_prompt("") == texts.briefing()
    assert texts.system_prompt("x", "write").endswith(texts.briefing("write"))


# -- Turn part, restatement, nudge ---------------------------------------------------------------------------------


def test_allowed_line() -> None:
    assert texts.allowed_line(["ask", "done"]) == "Allowed now: ask, done."
    assert texts.allowed_line(["ask"]) == "Allowed now: ask."
    empty = texts.allowed_line([])
    assert empty.startswith("Allowed now: none yet.")


def test_turn_part_is_prompt_blank_line_then_block_with_allowed_last() -> None:
    part = texts.turn_part("Write it.\n", ["ask"], ["The editor replied: ok", "  "])
    assert part == "Write it.\n\n<jr2-turn>\nNotice: The editor replied: ok\nAllowed now: ask.\n</jr2-turn>"


def test_turn_part_with_nothing_allowed_says_so_last() -> None:
    part = texts.turn_part("P", [])
    lines = part.splitlines()
    assert lines[-2] == texts.allowed_line([]) and lines[-1] == "</jr2-turn>"


def test_restatement_wording() -> None:
    assert texts.restatement(["done"]) == (
        "<jr2-turn>\nThe workflow's state changed since you last read the Allowed picks. Allowed now: done.\n"
        "</jr2-turn>"
    )


def test_nudge_states_allowed_last() -> None:
    n = texts.nudge(["ask", "done"])
    assert n.startswith("<jr2-turn>\nYou answered without a pick, and your turn is not over.")
    assert n.endswith("Allowed now: ask, done.\n</jr2-turn>")


# -- receipts ------------------------------------------------------------------------------------------------------


def test_correction_is_the_adr_sentence() -> None:
    assert texts.correction("finish") == ADR_CORRECTION


@pytest.mark.parametrize("refused", ["off_menu", "other_state", "other_party"])
def test_refusals_outside_the_state_get_the_correction(refused: str) -> None:
    r = receipt(delivered=False, refused=refused, allowed=["ask", "done"])
    assert texts.receipt_kind(r, "finish") == "correction"
    assert texts.receipt_text(r, "finish") == f"{ADR_CORRECTION}\nAllowed now: ask, done."


def test_moved_false_outside_allowed_gets_the_correction() -> None:
    r = receipt(allowed=["ask"])
    assert texts.receipt_text(r, "finish") == f"{ADR_CORRECTION}\nAllowed now: ask."


def test_moved_false_inside_allowed_says_change_the_arguments() -> None:
    r = receipt(allowed=["ask", "finish"])
    assert texts.receipt_kind(r, "finish") == "guard"
    t = texts.receipt_text(r, "finish")
    assert "a guard refused these arguments" in t and "Change the arguments" in t
    assert "whatever its arguments" not in t
    assert t.endswith("\nAllowed now: ask, finish.")


def test_bad_args_carries_the_validation_detail() -> None:
    r = receipt(delivered=False, refused="bad_args", detail="notes\n  Field required")
    t = texts.receipt_text(r, "done")
    assert t == (
        "done was refused and not delivered: its arguments do not match its schema.\nnotes\n  Field required\n"
        "Your turn is not over. Fix the arguments before you call it again.\nAllowed now: ask."
    )


def test_not_at_rest_says_wait() -> None:
    r = receipt(delivered=False, refused="not_at_rest", allowed=[])
    t = texts.receipt_text(r, "done")
    assert "still running" in t and "Your turn is not over" in t
    assert t.endswith(texts.allowed_line([]))


def test_moved_and_not_complete_goes_on_with_answer_and_allowed() -> None:
    r = receipt(moved=True, answer="The editor replied: yes", allowed=["ask", "done"])
    assert texts.receipt_text(r, "ask") == (
        "ask was taken. Your turn goes on.\nAnswer: The editor replied: yes\nAllowed now: ask, done."
    )
    assert texts.receipt_text(receipt(moved=True), "ask") == "ask was taken. Your turn goes on.\nAllowed now: ask."


def test_turn_complete_says_stop_and_never_lists_allowed() -> None:
    r = receipt(moved=True, turn_complete=True, allowed=["x"], answer="published")
    t = texts.receipt_text(r, "done")
    assert t == "done was taken.\nAnswer: published\nYour turn is over. Stop here: do not call another tool."
    assert texts.receipt_kind(r) == "complete"


def test_unfinished_says_the_turn_is_over() -> None:
    r = receipt(refused="unfinished", allowed=[], answer="partial")
    t = texts.receipt_text(r, "ask")
    assert t.startswith("ask did not finish") and "Answer: partial" in t
    assert t.endswith("Your turn is over. Stop here: do not call another tool.")
    assert texts.receipt_kind(r) == "unfinished"


def test_turn_over_refusal() -> None:
    r = receipt(delivered=False, refused="turn_over", allowed=[])
    assert texts.receipt_kind(r) == "turn_over"
    assert "Allowed now" not in texts.receipt_text(r, "ask")


def test_receipt_uses_its_own_pick_name_by_default() -> None:
    r = receipt(pick="finish")
    assert texts.receipt_text(r).startswith("finish is not allowed")


def test_only_turn_ending_receipts_tell_the_model_to_stop() -> None:
    stop = "Your turn is over. Stop here: do not call another tool."
    assert texts.receipt_kind(receipt(moved=True)) == "moved"
    assert texts.receipt_kind(receipt(refused="not_at_rest")) == "not_at_rest"
    assert stop not in texts.receipt_text(receipt(moved=True), "ask")
    assert stop not in texts.receipt_text(receipt(refused="not_at_rest"), "ask")


# -- harness-side results and working tools ------------------------------------------------------------------------


def test_working_tools_per_workspace_in_fixed_order() -> None:
    assert texts.working_tools("none") == []
    assert [t.name for t in texts.working_tools("read")] == ["read_file", "list_dir"]
    assert [t.name for t in texts.working_tools("write")] == ["read_file", "list_dir", "write_file", "run_command"]
    for tool in texts.working_tools("write"):
        assert tool.parameters["type"] == "object" and tool.description


def test_harness_side_texts() -> None:
    assert "not one valid JSON object (bad)" in texts.bad_json("ask", "bad")
    assert texts.not_run_turn_over("ask").startswith("ask was not run: your turn was already over.")
    assert texts.not_run_repeated("ask").startswith("ask was not run")
    assert texts.interrupted("ask").startswith("ask has no result")
    assert texts.outside_workspace("../x").startswith("Refused: ../x is outside")
    assert texts.dir_listing([]) == "(empty directory)"
    assert texts.dir_listing(["a/", "b"]) == "a/\nb"
    assert texts.file_content("abc", 3, 3) == "abc"
    assert texts.file_content("ab", 2, 5).endswith("[truncated: showing the first 2 of 5 characters]")
    assert texts.truncated_output("abcdef", 4) == "abcd\n[truncated: 2 more characters]"
    assert texts.truncated_output("abc", 4) == "abc"
    assert texts.command_result(1, "o", "e") == "exit code: 1\n--- stdout ---\no\n--- stderr ---\ne"
    assert texts.command_timed_out(2.5, "", "").startswith("The command was stopped after 2.5 seconds.")


def test_a_reused_delivery_id_has_its_own_receipt_text() -> None:
    r = Receipt(delivered=False, moved=False, turn_complete=False, allowed=["ask"], refused="reused_id", pick="ask")
    assert texts.receipt_kind(r) == "reused_id"
    text = texts.receipt_text(r)
    assert "not delivered" in text and "not allowed" not in text and "ask" in text.splitlines()[-1]
