"""Actor slots a Workflow can invoke: Agents, the built-in Gate, Effects and `fail()`.

These are plain specs; the Run decides how each kind starts (a Harness, a Gate card, a subprocess...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from .models import WORKSPACES, Thinking, Workspace
from .providers import model_prefix

TURN_INPUT_KEYS = frozenset({"prompt", "continue", "model", "thinking", "cwd"})


@dataclass(frozen=True)
class AgentSpec:
    """A model conversation. `driver="external"` lets a test or an outside process play it over surface/pick."""

    model: str
    instructions: str
    workspace: Workspace = "none"
    thinking: Thinking = None
    description: str | None = None
    masking: bool = False
    driver: Literal["harness", "external"] = "harness"
    kind: str = "agent"


@dataclass(frozen=True)
class GateSpec:
    """A point where people or webhooks send events. Its input is `{"meta": json}`."""

    kind: str = "gate"


class EffectSpec:
    """The base of every Effect slot: an at-most-once side effect the Run starts.

    A subclass is a frozen dataclass with a unique `kind` and an `idempotent` flag; the Run looks its kind up in the
    effector registry (`jr2ray.run.effectors`), so a new kind needs no change here.
    """

    __slots__ = ()
    kind: str
    idempotent: bool


@dataclass(frozen=True)
class CommandEffect(EffectSpec):
    """A subprocess. An exit code outside `ok_exit_codes` is an error (onError gets {exit_code, stdout, stderr});
    only the keys in `params` may come from the invoke input, and the argument callables see them as `input`."""

    argv: Sequence[str] | Callable[..., Sequence[str]]
    cwd: str | Callable[..., str] | None = None
    timeout_s: float = 60.0
    idempotent: bool = False
    ok_exit_codes: tuple[int, ...] = (0,)
    params: tuple[str, ...] = ()
    files: Sequence[str] | Callable[..., Sequence[str]] = ()
    allow_paths: tuple[str, ...] = ()
    kind: str = "effect.command"


@dataclass(frozen=True)
class HttpEffect(EffectSpec):
    """One HTTP call to a host the `http_effect_hosts` setting allows; only `params` keys may come from input."""

    method: str
    url: str | Callable[..., str]
    json: Any = None
    timeout_s: float = 30.0
    idempotent: bool = False
    params: tuple[str, ...] = ()
    kind: str = "effect.http"


@dataclass(frozen=True)
class FailSpec:
    """A slot whose invoke ends the run in `error` with its input's `reason`."""

    kind: str = "fail"


def agent(model: str, instructions: str, workspace: Workspace = "none", thinking: Thinking = None,
          description: str | None = None, masking: bool = False,
          driver: Literal["harness", "external"] = "harness") -> AgentSpec:
    if workspace not in WORKSPACES:
        raise ValueError(f"workspace must be one of {list(WORKSPACES)}, got {workspace!r}")
    try:
        TypeAdapter(Thinking).validate_python(thinking, strict=True)
    except ValidationError:
        raise ValueError(f"thinking must be a bool, a token budget or low/medium/high, got {thinking!r}") from None
    model_prefix(model)  # its shape only: the providers that declare prefixes may be imported later (harness)
    return AgentSpec(model, instructions, workspace, thinking, description, masking, driver)


gate = GateSpec()


class _EffectFactory:
    """`effect.command(...)` and `effect.http(...)`: at-most-once side effects, run by the Run."""

    @staticmethod
    def command(argv: Sequence[str] | Callable[..., Sequence[str]], cwd: str | Callable[..., str] | None = None,
                timeout_s: float = 60.0, idempotent: bool = False, ok_exit_codes: Sequence[int] = (0,),
                params: Sequence[str] = (), files: Sequence[str] | Callable[..., Sequence[str]] = (),
                allow_paths: Sequence[str] = ()) -> CommandEffect:
        """A subprocess, run at most once.

        - A non-zero exit is a failure: the invoke's `onError` gets `{message, exit_code, stdout, stderr}`. Say
          `ok_exit_codes=[0, 1, ...]` for a command whose other codes are answers, not failures.
        - `params`: the only invoke-input keys allowed; the `argv`/`cwd`/`files` callables read them as `input`.
          Any other key is refused at load (a literal input) or routed to `onError` (a computed one).
        - `cwd` (default: the run's workspace, `<home>/workspaces/<run id>`) and every path in `files` (the files
          the command names) must lie inside the workspace, or under one of `allow_paths`, which the workflow
          author writes; relative paths resolve against the workspace.
        """
        if not all(isinstance(c, int) for c in ok_exit_codes):
            raise ValueError(f"ok_exit_codes must be integers, got {list(ok_exit_codes)!r}")
        return CommandEffect(argv, cwd, timeout_s, idempotent, tuple(ok_exit_codes), tuple(params), files,
                             tuple(str(p) for p in allow_paths))

    @staticmethod
    def http(method: str, url: str | Callable[..., str], json: Any = None, timeout_s: float = 30.0,
             idempotent: bool = False, params: Sequence[str] = ()) -> HttpEffect:
        """One HTTP call. A non-2xx status is an output; a transport failure, or a host (after DNS, and after each
        redirect) that the `http_effect_hosts` setting does not allow, goes to `onError`. Loopback, link-local
        and private addresses are denied unless listed. `params` as for `command`."""
        return HttpEffect(method.upper(), url, json, timeout_s, idempotent, tuple(params))


effect = _EffectFactory()


def fail() -> FailSpec:
    return FailSpec()


ActorSpec = AgentSpec | GateSpec | EffectSpec | FailSpec
