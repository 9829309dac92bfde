"""The worked example of docs/design.md: a writer drafts release notes, may ask an editor, and finishes with `done`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from jr2ray import agent, answer, assign, define_event, fail, jr2_setup
from jr2ray.settings import load_settings

SETTINGS = load_settings()  # read at import: a Run actor imports its workflow after applying its env


class AskInput(BaseModel):
    question: str = Field(description="One question for the editor.")


class DoneInput(BaseModel):
    notes: str = Field(description="The release notes, in Markdown.")


class ReplyInput(BaseModel):
    text: str = Field(description="The answer, in prose.")


class Door(BaseModel):
    changes: str = Field(description="The changes in this release, one on each line.")


# The writer's picks. Each one is a tool on the writer's Menu.
ask = define_event(name="ask",
                   description="Ask the editor one question. The editor's reply is the answer to this call.",
                   input=AskInput)
done = define_event(name="done", description="Call this once, with the finished release notes. Then stop.",
                    input=DoneInput)
# The editor's reply. The editor sends it to a Gate, so it is not on the writer's Menu.
reply = define_event(name="reply", description="Answer the writer's question.", input=ReplyInput)

WRITER_MODEL = SETTINGS.notes_model


def _fault_reason(event: Any) -> dict[str, str]:
    """The run's error keeps why the Turn could not go on (the Harness's reason rides on `agent.fault`)."""
    return {"reason": f"the Agent's Turn could not go on: {event.get('reason') or 'no reason given'}"}


machine = jr2_setup(
    events=[ask, done, reply],
    actors={
        "writer": agent(model=WRITER_MODEL,
                        instructions="You write short release notes. Ask the editor at least one question before "
                                     "you finish.",
                        workspace="none", masking=WRITER_MODEL.startswith("local/"),
                        driver=SETTINGS.notes_driver),
        "fail": fail(),
    },
    input=Door,
).create_machine({
    "id": "notes",
    "context": lambda input: {"changes": input.changes, "replies": 0},
    "on": {"agent.fault": ".failed"},
    "initial": "writing",
    "states": {
        # The writer's state. Its Turn lasts until `done` leaves it.
        "writing": {
            "invoke": {"src": "writer",
                       "input": lambda context: {"prompt": f"Write the release notes for these changes:\n"
                                                           f"{context['changes']}"}},
            "on": {
                # The guard keeps `done` out of the Allowed picks until the editor has replied once.
                "done": {"guard": lambda context: context["replies"] > 0, "target": "published",
                         "actions": assign(notes=lambda event: event.notes)},
            },
            "initial": "drafting",
            "states": {
                # A mode: it invokes nothing, so the writer is at Rest here and can pick `ask`.
                "drafting": {"on": {"ask": {"target": "asking",
                                            "actions": assign(question=lambda event: event.question)}}},
                # While this Gate is open, the `ask` pick is outstanding and the writer can pick nothing.
                "asking": {
                    "invoke": {"src": "gate", "input": lambda context: {"meta": {"question": context["question"]}}},
                    "on": {"reply": {"target": "drafting", "actions": [
                        assign(replies=lambda context: context["replies"] + 1),
                        # The writer reads this text as the answer to its `ask`.
                        answer(lambda event: f"The editor replied: {event.text}"),
                    ]}},
                },
            },
        },
        "published": {"type": "final"},
        "failed": {"invoke": {"src": "fail", "input": _fault_reason}},
    },
    # The output of the run: the root `output`, not an `output` on the final state.
    "output": lambda context: {"notes": context.get("notes", "")},
})
