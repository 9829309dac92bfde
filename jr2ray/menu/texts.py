"""Every text a model reads, in one module (D11).

The Harness places these texts; it never words them. Keeping them here means one place decides what an Agent is
told, and the Run layer's receipts and the Harness's rendering cannot drift apart. Pure: stdlib and the boundary
models only, no I/O, no clock, no counters, so every function is byte-stable for the same input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from jr2ray.authoring.events import BadArguments
from jr2ray.authoring.models import MenuItem, Workspace
from jr2ray.menu.receipt import Receipt

TURN_OPEN = "<jr2-turn>"
TURN_CLOSE = "</jr2-turn>"
BRIEFING_OPEN = "<jr2-briefing>"
BRIEFING_CLOSE = "</jr2-briefing>"

#: The sentence that opens a restatement (H5). Tests and the Harness look for it.
STATE_CHANGED = "The workflow's state changed since you last read the Allowed picks."

# ---------------------------------------------------------------------------------------------------------------------
# The standing Briefing (H2): byte-stable per seat, no Menu names, no clock, no counters.

_BRIEFING_CORE = (
    "You work inside a workflow. The workflow, not you, decides which step comes next; you move it by picks.\n"
    "\n"
    "A pick is a call of one of your workflow tools. Every workflow tool stays in your tool list for the whole "
    'conversation, but a pick counts only when the newest "Allowed now" line lists it. You read an "Allowed '
    "now\" line at the end of each turn's message, in the answer to each pick that does not end your turn, and in "
    "a note whenever the workflow's state changes while you work. Always go by the newest one; an older list may "
    "be out of date.\n"
    "\n"
    "Each answer to a pick says whether your turn is over. If your turn goes on, keep working and pick again from "
    'the newest "Allowed now". If your turn is over, stop: do not call another tool.\n'
    "\n"
    "Text without a tool call does not reach the workflow. To hand in work, ask for something or finish, make a "
    "pick. If a pick is refused as not allowed, new arguments will not help: pick one of the allowed tools "
    'instead. If "Allowed now" lists nothing, something in the workflow is still running: stop for now, and a '
    "later message will tell you when a pick opens."
)

_BRIEFING_WORKSPACE: dict[str, str] = {
    "none": "",
    "read": (
        "\n\n"
        "You also have working tools, read_file and list_dir. They read files in your working directory, change "
        'nothing in the workflow, and are never listed in "Allowed now": you may use them at any time during your '
        "turn. Paths are relative to your working directory, and nothing outside it can be read."
    ),
    "write": (
        "\n\n"
        "You also have working tools, read_file, list_dir, write_file and run_command. They work in your working "
        'directory, change nothing in the workflow, and are never listed in "Allowed now": you may use them at '
        "any time during your turn. Paths are relative to your working directory, and nothing outside it can be "
        "read or written. run_command runs a shell command there and returns its exit code and output."
    ),
}


def briefing(workspace: Workspace = "none") -> str:
    """The standing Briefing block. The same bytes for every Turn of a seat, so the cached prefix survives."""
    return f"{BRIEFING_OPEN}\n{_BRIEFING_CORE}{_BRIEFING_WORKSPACE[workspace]}\n{BRIEFING_CLOSE}"


def system_prompt(instructions: str, workspace: Workspace = "none") -> str:
    """The system prompt: the Agent's instructions, then the standing Briefing."""
    instructions = instructions.strip()
    block = briefing(workspace)
    return f"{instructions}\n\n{block}" if instructions else block


# ---------------------------------------------------------------------------------------------------------------------
# Allowed picks, the Turn part (H3) and the restatement (H5).


def allowed_line(allowed: Sequence[str]) -> str:
    """The one line that states the Allowed picks. It is always the last line of whatever carries it."""
    if not allowed:
        return "Allowed now: none yet. Stop for now; a later message will tell you when a pick opens."
    return f"Allowed now: {', '.join(allowed)}."


def _turn_block(lines: Sequence[str]) -> str:
    return "\n".join([TURN_OPEN, *lines, TURN_CLOSE])


def notice_line(notice: str) -> str:
    """One notice: an answer or fact kept from the last Turn of this conversation."""
    return f"Notice: {notice.strip()}"


def turn_part(prompt: str, allowed: Sequence[str], notices: Sequence[str] = ()) -> str:
    """The user message of a Turn: the prompt, a blank line, then the Turn block with "Allowed now" last."""
    lines = [notice_line(n) for n in notices if n.strip()]
    lines.append(allowed_line(allowed))
    return f"{prompt.rstrip()}\n\n{_turn_block(lines)}"


def restatement(allowed: Sequence[str]) -> str:
    """Appended at a step boundary when the Allowed picks changed under the model as a set (H5)."""
    return _turn_block([f"{STATE_CHANGED} {allowed_line(allowed)}"])


def nudge(allowed: Sequence[str]) -> str:
    """The no-signal nudge (H8): the model answered in text while picks were allowed."""
    return _turn_block(
        [
            "You answered without a pick, and your turn is not over. Text alone does not reach the workflow: "
            "call one of the allowed tools.",
            allowed_line(allowed),
        ]
    )


# ---------------------------------------------------------------------------------------------------------------------
# Receipts (D11): the tool result of a pick.

ReceiptKind = Literal[
    "complete",  # the pick ended the Turn
    "moved",  # the pick moved the Machine and the Turn goes on
    "guard",  # delivered inside the Allowed picks, but a guard that read the arguments said no
    "correction",  # not allowed in this state, whatever the arguments
    "bad_args",  # the arguments failed the event's schema
    "not_at_rest",  # something runs below the Agent's state; nothing delivered
    "unfinished",  # the pick's work was cut off; the Turn is over
    "turn_over",  # the Turn had ended before the pick arrived
    "reused_id",  # the pick's delivery id was used before for another pick or other arguments; nothing delivered
]


def receipt_kind(receipt: Receipt, pick: str | None = None) -> ReceiptKind:
    """Classify a receipt once, so the text and the Harness's control flow agree on what it means."""
    name = pick if pick is not None else receipt.pick
    if receipt.refused == "turn_over":
        return "turn_over"
    if receipt.refused == "unfinished":
        return "unfinished"
    if receipt.turn_complete:
        return "complete"
    if receipt.refused == "not_at_rest":
        return "not_at_rest"
    if receipt.refused == "bad_args":
        return "bad_args"
    if receipt.refused == "reused_id":
        return "reused_id"
    if receipt.refused is not None:
        return "correction"
    if receipt.moved:
        return "moved"
    return "guard" if name in receipt.allowed else "correction"


def correction(pick: str) -> str:
    """The sentence for a pick the current state refuses whatever its arguments (D3, D11.1)."""
    return (
        f"{pick} is not allowed in the workflow's current state, whatever its arguments. Your turn is not over. "
        "Do not repeat this call — pick one of the allowed tools."
    )


_STOP = "Your turn is over. Stop here: do not call another tool."


def _answer_line(answer: str | None) -> list[str]:
    return [f"Answer: {answer}"] if answer else []


def receipt_text(receipt: Receipt, pick: str | None = None) -> str:
    """The tool result the model reads for a pick: what happened, any answer, and either stop or Allowed now."""
    name = pick if pick is not None else (receipt.pick or "This pick")
    kind = receipt_kind(receipt, name)
    if kind == "complete":
        return "\n".join([f"{name} was taken.", *_answer_line(receipt.answer), _STOP])
    if kind == "unfinished":
        return "\n".join(
            [
                f"{name} did not finish: the workflow left the state of your turn while its work was running.",
                *_answer_line(receipt.answer),
                _STOP,
            ]
        )
    if kind == "turn_over":
        return "\n".join([f"{name} was not delivered: your turn had already ended.", _STOP])
    if kind == "moved":
        lines = [f"{name} was taken. Your turn goes on.", *_answer_line(receipt.answer)]
    elif kind == "guard":
        lines = [
            f"{name} was delivered, but a guard refused these arguments, so nothing moved. Your turn is not over. "
            "Change the arguments, or pick another allowed tool."
        ]
    elif kind == "bad_args":
        detail = (receipt.detail or "").strip()
        lines = [f"{name} was refused and not delivered: its arguments do not match its schema."]
        if detail:
            lines.append(detail)
        lines.append("Your turn is not over. Fix the arguments before you call it again.")
    elif kind == "not_at_rest":
        lines = [
            f"{name} was refused and not delivered: something the workflow started is still running, and no pick "
            "is allowed until it finishes. Your turn is not over. Do not repeat this call; wait until a pick opens."
        ]
    elif kind == "reused_id":
        lines = [
            f"{name} was refused and not delivered: it came with the id of an earlier call that had other "
            "arguments, so it was taken for a wrong retry. Your turn is not over. Call it again as a new call."
        ]
    else:
        lines = [correction(name)]
    lines.append(allowed_line(receipt.allowed))
    return "\n".join(lines)


def sender_refused() -> str:
    """The one wording, for a model or a Gate, of arguments that carry `sender`: only jr2ray writes the Sender.

    The HTTP layer may import it for the same refusal; the load-time error for a schema field is authoring's.
    """
    return "'sender' is written by jr2ray; no party may send it"


def bad_arguments(error: BadArguments) -> str:
    """The detail of a `bad_args` receipt (and of a refused Gate send): what is wrong with the arguments."""
    if error.problem == "not_object":
        return f"the arguments of {error.event!r} must be a JSON object, got {error.items[0]}"
    if error.problem == "sender":
        return sender_refused()
    if error.problem == "unknown":
        return f"unknown argument(s) for {error.event!r}: {', '.join(error.items)}"
    return f"invalid arguments for {error.event!r}: " + "; ".join(error.items)


# ---------------------------------------------------------------------------------------------------------------------
# Tool results the Harness writes itself (no pick reached the Run).


def bad_json(name: str, error: str) -> str:
    """A call whose arguments are not one JSON object: nothing was sent anywhere."""
    return (
        f"The arguments of {name} are not one valid JSON object ({error}). Nothing was sent. Your turn is not over; "
        "call again with the arguments as one JSON object."
    )


def bad_json_syntax(name: str, message: str, position: int) -> str:
    """Arguments that do not parse: the parser's message and where it stopped."""
    return bad_json(name, f"{message} at position {position}")


def bad_json_type(name: str, json_type: str) -> str:
    """Arguments that parse, but to a JSON value other than an object (a list, a number...)."""
    return bad_json(name, f"got a JSON {json_type}")


def not_run_turn_over(name: str) -> str:
    """A call in the same answer as a pick that ended the Turn."""
    return f"{name} was not run: your turn was already over. {_STOP}"


def not_run_repeated(name: str) -> str:
    """The call that tripped the runaway limit (H9)."""
    return (
        f"{name} was not run: it is the same call with the same arguments several times in a row, so your turn was "
        "stopped."
    )


def interrupted(name: str) -> str:
    """A call whose result never came back because the Turn was aborted."""
    return f"{name} has no result: your turn ended while it ran. {_STOP}"


def interrupted_by_restart(name: str) -> str:
    """A Working tool call whose result was lost when the Turn was restarted; it is not run twice."""
    return f"{name} has no result: your turn was interrupted while it ran, and it was not run again."


#: The sentence that opens the notice of a restarted Turn. Tests and the Harness look for it.
TURN_RESTARTED = "Your turn was interrupted and has restarted. The conversation above is kept; go on from there."


#: The notice a Turn reads when an operator moved its run to a new version of its workflow (`jr2ray migrate`).
WORKFLOW_MOVED = ("Your workflow was updated while you worked, and this turn restarts on the new version. Your tools "
                  "and their descriptions may have changed; use the ones you have now.")


def workflow_moved() -> str:
    """The notice of a Turn whose run `jr2ray migrate` moved to another version of its workflow."""
    return WORKFLOW_MOVED


def turn_restarted(allowed: Sequence[str]) -> str:
    """Appended when a Turn restarts after its Harness or its Run went away: the earlier messages stay as they were
    (so the cached prefix still hits), and this says so, with the Allowed picks now."""
    return _turn_block([TURN_RESTARTED, allowed_line(allowed)])


# ---------------------------------------------------------------------------------------------------------------------
# Working tools (read/write workspaces): their descriptions and their results.

_PATH_PARAM = {
    "type": "string",
    "description": "A path relative to your working directory.",
}

_WORKING_TOOLS: dict[str, MenuItem] = {
    "read_file": MenuItem(
        name="read_file",
        description="Read a text file in your working directory. Reading changes nothing in the workflow.",
        parameters={
            "type": "object",
            "properties": {"path": _PATH_PARAM},
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    "list_dir": MenuItem(
        name="list_dir",
        description=(
            "List the entries of a directory in your working directory; a directory's name ends with '/'. "
            "Listing changes nothing in the workflow."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "A path relative to your working directory; '.' is the working directory itself.",
                }
            },
            "additionalProperties": False,
        },
    ),
    "write_file": MenuItem(
        name="write_file",
        description=(
            "Write a text file in your working directory, replacing it if it exists; missing parent directories "
            "are made. Writing a file changes nothing in the workflow."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": _PATH_PARAM,
                "content": {"type": "string", "description": "The whole new content of the file."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    ),
    "run_command": MenuItem(
        name="run_command",
        description=(
            "Run one shell command in your working directory and return its exit code, output and errors. "
            "A command changes nothing in the workflow."
        ),
        parameters={
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, run by /bin/sh."},
                "timeout_s": {
                    "type": "integer",
                    "description": "Seconds before the command is stopped.",
                    "minimum": 1,
                    "maximum": 600,
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    ),
}

_WORKING_BY_WORKSPACE: dict[str, tuple[str, ...]] = {
    "none": (),
    "read": ("read_file", "list_dir"),
    "write": ("read_file", "list_dir", "write_file", "run_command"),
}


def working_tools(workspace: Workspace) -> list[MenuItem]:
    """The Working tools of a workspace, in a fixed order, placed after the Menu in the tools block (H1)."""
    return [_WORKING_TOOLS[n] for n in _WORKING_BY_WORKSPACE[workspace]]


def outside_workspace(path: str) -> str:
    return f"Refused: {path} is outside your working directory. Use a path inside it."


def not_found(path: str) -> str:
    return f"No such file or directory in your working directory: {path}"


def is_a_directory(path: str) -> str:
    return f"{path} is a directory. Use list_dir to see its entries."


def not_a_directory(path: str) -> str:
    return f"{path} is not a directory. Use read_file to read it."


WorkingArgProblem = Literal["not_a_tool", "path", "path_type", "content", "command", "timeout"]

_WORKING_ARG_PROBLEMS: dict[str, str] = {
    "not_a_tool": "it is not one of your working tools",
    "path": "'path' must be a non-empty string",
    "path_type": "'path' must be a string",
    "content": "'content' must be a string",
    "command": "'command' must be a non-empty string",
    "timeout": "'timeout_s' must be a positive number",
}


def bad_working_args(name: str, problem: WorkingArgProblem) -> str:
    """A Working tool call that was not run, and which argument to fix."""
    return f"{name} was not run: {_WORKING_ARG_PROBLEMS[problem]}. Fix the arguments and call it again."


def os_failure(name: str, error_type: str, detail: str) -> str:
    """A Working tool the operating system refused (permission, disk full...): the error's kind and its message."""
    return f"{name} failed: {error_type}: {detail}"


def file_content(text: str, shown: int, total: int) -> str:
    """A file's text, with a note when only its head fits."""
    if shown >= total:
        return text
    return f"{text}\n[truncated: showing the first {shown} of {total} characters]"


def dir_listing(entries: Sequence[str]) -> str:
    return "\n".join(entries) if entries else "(empty directory)"


def wrote_file(path: str, chars: int) -> str:
    return f"Wrote {chars} characters to {path}."


def command_result(exit_code: int, stdout: str, stderr: str) -> str:
    """A finished command: its exit code, then its output and its errors."""
    return f"exit code: {exit_code}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"


def command_timed_out(seconds: float, stdout: str, stderr: str) -> str:
    return f"The command was stopped after {seconds:g} seconds.\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"


def truncated_output(text: str, limit: int) -> str:
    """Keep a long output's head within `limit` characters, and say how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[truncated: {len(text) - limit} more characters]"
