"""A coder implements a task, a checker reviews it, and the coder fixes it on the same conversation.

The cross-state continue case of a fixed Menu (M2, H7): two states invoke the coder slot with `continue: True`, so one
conversation spans `implement` and `fix`. Its Menu is the union of both derived sets (dispute, finish, run_tests),
byte-identical in both states; `dispute` is on the Menu in `implement` too, but never in its Allowed picks there.

    implement (coder)      working --run_tests--> testing (Effect) --onDone--> working;   finish --> review
    review    (Gate)       approve --> merged (final);   request_changes --> fix
    fix       (coder)      working --run_tests--> testing (Effect) --onDone--> working;   finish | dispute --> review
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel, Field

from jr2ray import agent, answer, assign, define_event, effect, fail, jr2_setup
from jr2ray.settings import load_settings

SETTINGS = load_settings()  # read at import: a Run actor imports its workflow after applying its env


class Door(BaseModel):
    task: str = Field(description="What to implement, in prose.")


class RunTestsInput(BaseModel):
    pass


class FinishInput(BaseModel):
    summary: str = Field(description="What you changed, for the checker.")


class DisputeInput(BaseModel):
    reason: str = Field(description="Why the requested change is wrong or not needed, for the checker.")


class ApproveInput(BaseModel):
    comment: str = Field(default="", description="An optional comment on the work.")


class RequestChangesInput(BaseModel):
    notes: str = Field(description="What the coder must change, in prose.")


# The coder's picks. The Menu is the union over `implement` and `fix`: dispute, finish, run_tests.
run_tests = define_event(
    name="run_tests",
    description="Run the test suite in your working directory. Its output is the answer to this call.",
    input=RunTestsInput)
finish = define_event(
    name="finish",
    description="Hand your work to the checker, with a summary of what you changed. Your turn ends.",
    input=FinishInput)
dispute = define_event(
    name="dispute",
    description="Tell the checker that a requested change is wrong, and why, instead of making it. Your turn ends.",
    input=DisputeInput)
# The checker's events. The checker sends them to the Gate in `review`, so they are on no Menu.
approve = define_event(name="approve", description="Accept the work as it is.", input=ApproveInput)
request_changes = define_event(name="request_changes", description="Send the work back to the coder with notes.",
                               input=RequestChangesInput)

CODER_MODEL = SETTINGS.coder_model


def _test_report(output: Any) -> str:
    """An Effect's `{exit_code, stdout, stderr}` as the text the coder reads in answer to `run_tests`."""
    if isinstance(output, dict):
        code = output.get("exit_code")
        out = str(output.get("stdout") or "").rstrip()
        err = str(output.get("stderr") or "").rstrip()
        parts = [f"The tests ran (exit code {code})." if code is not None else "The tests ran."]
        if out:
            parts.append(out)
        if err:
            parts.append(f"stderr:\n{err}")
        return "\n".join(parts)
    return f"The tests ran.\n{'' if output is None else output}".rstrip()


def _testing() -> dict[str, Any]:
    """A child state that runs the tests; the Effect's output is the answer to the `run_tests` pick."""
    return {
        "invoke": {
            "src": "tests",
            "onDone": {"target": "working", "actions": [
                assign(test_output=lambda event: event.get("output")),
                answer(lambda event: _test_report(event.get("output"))),
            ]},
            "onError": {"target": "working",
                        "actions": answer(lambda event: f"The tests could not run: {event.get('error')}")},
        },
    }


def _implement_prompt(context: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": f"Implement this task in your working directory:\n{context['task']}\n\n"
                      "Run the tests before you finish.",
            "continue": True}


def _fix_prompt(context: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": f"The checker asked for changes:\n{context['notes']}\n\n"
                      "Make them, run the tests and finish; or dispute them if they are wrong.",
            "continue": True}


def _fault_reason(event: Any) -> dict[str, str]:
    """The run's error keeps why the Turn could not go on (the Harness's reason rides on `agent.fault`)."""
    return {"reason": f"the coder's Turn could not go on: {event.get('reason') or 'no reason given'}"}


machine = jr2_setup(
    events=[run_tests, finish, dispute, approve, request_changes],
    actors={
        "coder": agent(model=CODER_MODEL,
                       instructions="You are a careful programmer. You implement tasks in your working directory, "
                                    "run the tests, and hand your work to a checker.",
                       workspace="write", masking=True,
                       driver=SETTINGS.coder_driver),
        "tests": effect.command(argv=[sys.executable, "-c", "print('tests ran')"], timeout_s=30),
        "fail": fail(),
    },
    input=Door,
).create_machine({
    "id": "coder",
    "context": lambda input: {"task": input.task, "summary": None, "notes": None, "dispute": None,
                              "test_output": None, "rounds": 0},
    "on": {"agent.fault": ".failed"},
    "initial": "implement",
    "states": {
        # The coder's first Turn. It may test as often as it likes, then finish.
        "implement": {
            "invoke": {"src": "coder", "input": _implement_prompt},
            "on": {"finish": {"target": "review", "actions": assign(summary=lambda event: event.summary)}},
            "initial": "working",
            "states": {
                "working": {"on": {"run_tests": "testing"}},
                "testing": _testing(),
            },
        },
        # The checker's Gate: approve ends the run, request_changes sends the work back on the same conversation.
        "review": {
            "invoke": {"src": "gate", "id": "checker",
                       "input": lambda context: {"meta": {"task": context["task"], "summary": context["summary"],
                                                          "dispute": context["dispute"],
                                                          "rounds": context["rounds"]}}},
            "on": {
                "approve": "merged",
                "request_changes": {"target": "fix", "actions": assign(
                    notes=lambda event: event.notes, dispute=None,
                    rounds=lambda context: context["rounds"] + 1)},
            },
        },
        # The same coder, continuing its conversation: it may also dispute the checker's notes.
        "fix": {
            "invoke": {"src": "coder", "input": _fix_prompt},
            "on": {
                "finish": {"target": "review", "actions": assign(summary=lambda event: event.summary)},
                "dispute": {"target": "review", "actions": assign(dispute=lambda event: event.reason)},
            },
            "initial": "working",
            "states": {
                "working": {"on": {"run_tests": "testing"}},
                "testing": _testing(),
            },
        },
        "merged": {"type": "final"},
        "failed": {"invoke": {"src": "fail", "input": _fault_reason}},
    },
    "output": lambda context: {"summary": context.get("summary") or "", "rounds": context["rounds"]},
})
