"""Numbers a schema bounds are checked by the schema: a pick argument out of its event schema's range gets a D4
refusal receipt and changes nothing (status, history and journal byte-identical), whether or not decoding kept the
bound; masking keeps a small integer range in the regex sent to vLLM, and leaves other bounds to that check."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from jr2ray import LocalRun, agent, assign, define_event, jr2_setup
from jr2ray.harness.masking import MAX_ENUMERATED_RANGE, arguments_regex
from jr2ray.run.store import Store


class Door(BaseModel):
    volume: int = Field(default=3, ge=0, le=10, description="Starting volume.")


class SetInput(BaseModel):
    level: int = Field(ge=1, le=5, description="A level from 1 to 5.")
    ratio: float = Field(default=0.5, ge=0, le=1.5, description="A mix ratio.")


set_level = define_event(name="set", description="Set the level.", input=SetInput)
dial = jr2_setup(events=[set_level], actors={"op": agent(model="local/tiny", instructions="Set the dial.",
                                                         driver="external")}, input=Door).create_machine({
    "id": "dial",
    "context": lambda input: {"volume": input.volume, "level": 0},
    "initial": "tuning",
    "states": {"tuning": {"invoke": {"src": "op"},
                          "on": {"set": {"actions": assign(level=lambda event: event.level)}}}},
})


def _observe(run: LocalRun, store: Store) -> dict[str, Any]:
    j = store.open(run.id)
    try:
        row = j.run()
        journal = {"run": row.model_dump(mode="json") if row else None,
                   "ledger": [e.model_dump(mode="json") for e in j.ledger()], "snapshot": j.latest_snapshot()}
    finally:
        j.close()
    state = {"status": run.status().model_dump(mode="json"), "history": run.engine.feed(0), "journal": journal}
    return json.loads(json.dumps(state, default=str))


@pytest.mark.parametrize(("args", "words"), [
    ({"level": 9}, ("level", "less than or equal to 5")),
    ({"level": 0}, ("level", "greater than or equal to 1")),
    ({"level": 3, "ratio": 9.5}, ("ratio", "less than or equal to 1.5")),  # decoding could not keep this bound
    ({"level": 3, "ratio": -1}, ("ratio", "greater than or equal to 0")),
])
async def test_a_pick_out_of_its_schemas_bounds_is_refused_by_d4_and_changes_nothing(
        tmp_path: Path, args: dict[str, Any], words: tuple[str, ...]) -> None:
    store = Store(tmp_path)
    run = LocalRun(dial, {"volume": 3}, store=store)
    (turn,) = [t for t in run.status().turns if t.active]
    before = _observe(run, store)
    receipt = await run.pick(turn.iid, "set", args, delivery_id="d-1")
    assert (receipt.delivered, receipt.moved, receipt.refused) == (False, False, "bad_args")
    for w in words:
        assert w in (receipt.detail or ""), receipt.detail
    after = _observe(run, store)
    # The refused attempt shows on the live feed only (never journaled): everything else is as it was.
    feed_added = after["history"][len(before["history"]):]
    assert [e["kind"] for e in feed_added] == ["pick", "receipt"]
    assert {**after, "history": after["history"][:len(before["history"])]} == before
    ok = await run.pick(turn.iid, "set", {"level": 5, "ratio": 1.5}, delivery_id="d-2")  # the edges are in range
    assert ok.delivered and run.context["level"] == 5


def test_the_door_refuses_a_number_out_of_its_bounds() -> None:
    with pytest.raises(ValueError, match="less than or equal to 10"):
        dial.validate_input({"volume": 11})
    with pytest.raises(ValueError, match="volume: Unable to parse input string as an integer"):
        dial.validate_input({"volume": 1e30})


def test_masking_keeps_a_small_integer_range_and_leaves_a_float_range_to_the_schema_check() -> None:
    rx = arguments_regex(SetInput.model_json_schema())
    for level in range(1, 6):
        assert re.fullmatch(rx, f'{{"level":{level},"ratio":0.5}}')
    for level in (0, 6, 9, -3, 10):
        assert not re.fullmatch(rx, f'{{"level":{level},"ratio":0.5}}'), level
    assert re.fullmatch(rx, '{"level":3,"ratio":9.5}')  # a regex cannot say "at most 1.5": D4 refuses it (above)


@pytest.mark.parametrize(("field", "inside", "outside"), [
    ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 4}, [1, 3], [0, 4]),
    ({"type": "integer", "minimum": -2, "maximum": 2}, [-2, 0, 2], [-3, 3]),
    ({"type": "integer", "minimum": 1.5, "maximum": 3.5}, [2, 3], [1, 4]),
])
def test_masking_enumerates_integer_ranges_exactly(field: dict[str, Any], inside: list[int],
                                                   outside: list[int]) -> None:
    rx = arguments_regex({"type": "object", "properties": {"n": field}, "required": ["n"]})
    assert all(re.fullmatch(rx, f'{{"n":{n}}}') for n in inside)
    assert not any(re.fullmatch(rx, f'{{"n":{n}}}') for n in outside)


def test_a_wide_or_one_sided_integer_range_is_left_open_in_decoding() -> None:
    wide = {"type": "integer", "minimum": 0, "maximum": MAX_ENUMERATED_RANGE}
    one_sided = {"type": "integer", "minimum": 0}
    for field in (wide, one_sided):
        rx = arguments_regex({"type": "object", "properties": {"n": field}, "required": ["n"]})
        assert re.fullmatch(rx, '{"n":12345}')
