"""A release operator: plans with notes, runs a deploy command (an Effect), waits for approval (a Gate), then a
cooldown timer. Small, but it exercises every kind of work a Run must survive a crash in."""

from __future__ import annotations

import sys

from pydantic import BaseModel, Field

from jr2ray import agent, answer, assign, define_event, effect, jr2_setup
from jr2ray.settings import load_settings

SETTINGS = load_settings()  # read at import: a Run actor imports its workflow after applying its env


class NoteInput(BaseModel):
    text: str = Field(description="One line for the release log.")


class Empty(BaseModel):
    pass


class ApproveInput(BaseModel):
    by: str = Field(description="Who approves.")


class RejectInput(BaseModel):
    why: str = Field(description="Why the release is rejected.")


class Door(BaseModel):
    log_path: str = Field(default="deploy.log", description="The file the deploy command appends one line to, "
                                                            "inside the run's workspace.")
    deploy_seconds: float = Field(default=0.2, ge=0, le=600, description="How long the deploy command runs.")
    cooldown_ms: int = Field(default=1000, ge=0, le=3_600_000,
                             description="How long to wait after approval before release (at most an hour).")


note = define_event(name="note", description="Add one line to the release log. Nothing else happens.",
                    input=NoteInput)
deploy = define_event(name="deploy", description="Run the deploy command. Its output is the answer to this call.",
                      input=Empty)
submit = define_event(name="submit", description="Submit the release for approval. Then stop.", input=Empty)
approve = define_event(name="approve", description="Approve the release.", input=ApproveInput)
reject = define_event(name="reject", description="Reject the release and send it back.", input=RejectInput)


def _deploy_argv(context: dict) -> list[str]:
    script = ("import sys, time; time.sleep(float(sys.argv[2])); "
              "open(sys.argv[1], 'a').write('deployed\\n'); print('deployed')")
    return [sys.executable, "-c", script, context["log_path"], str(context["deploy_seconds"])]


machine = jr2_setup(
    events=[note, deploy, submit, approve, reject],
    actors={
        "operator": agent(model=SETTINGS.deploy_model,
                          instructions="You prepare a release: note what matters, deploy once, then submit.",
                          masking=True, driver=SETTINGS.deploy_driver),
        # A non-zero exit goes to onError; the log file must lie in the run's workspace (no allow_paths).
        "run_deploy": effect.command(argv=_deploy_argv, files=lambda context: [context["log_path"]], timeout_s=60),
    },
    input=Door,
    delays={"cooldown": lambda context: context["cooldown_ms"]},
).create_machine({
    "id": "deploy",
    "context": lambda input: {"log_path": input.log_path, "deploy_seconds": input.deploy_seconds,
                              "cooldown_ms": input.cooldown_ms, "notes": [], "deploys": 0},
    "initial": "planning",
    "states": {
        "planning": {
            "invoke": {"src": "operator", "input": {"prompt": "Prepare the release.", "continue": True}},
            "initial": "idle",
            "on": {"submit": {"target": "approval", "guard": lambda context: context["deploys"] > 0}},
            "states": {
                "idle": {"on": {
                    "note": {"actions": assign(notes=lambda context, event: [*context["notes"], event.text])},
                    "deploy": "deploying",
                }},
                "deploying": {
                    "invoke": {"src": "run_deploy",
                               "onDone": {"target": "idle", "actions": [
                                   assign(deploys=lambda context: context["deploys"] + 1),
                                   answer(lambda event: f"deploy finished: {event.output['stdout'].strip()}")]},
                               "onError": {"target": "idle",
                                           "actions": answer(
                                               lambda event: f"deploy failed: {event.error['message']}")}},
                },
            },
        },
        "approval": {
            "invoke": {"src": "gate", "id": "approval", "input": lambda context: {"meta": {"notes": context["notes"]}}},
            "on": {"approve": "cooldown", "reject": "planning"},
        },
        "cooldown": {"after": {"cooldown": "released"}},
        "released": {"type": "final"},
    },
    "output": lambda context: {"deploys": context["deploys"], "notes": context["notes"]},
})
