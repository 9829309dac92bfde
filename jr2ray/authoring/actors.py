"""Actor slots a Workflow can invoke: Agents, the built-in Gate, Effects and `fail()`.

These are plain specs; the Run decides how each kind starts (a Harness, a Gate card, a subprocess...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from .models import WORKSPACES, Thinking, Workspace

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
    argv: Sequence[str] | Callable[..., Sequence[str]]
    cwd: str | Callable[..., str] | None = None
    timeout_s: float = 60.0
    idempotent: bool = False
    kind: str = "effect.command"


@dataclass(frozen=True)
class HttpEffect(EffectSpec):
    method: str
    url: str | Callable[..., str]
    json: Any = None
    timeout_s: float = 30.0
    idempotent: bool = False
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
    if not model or "/" not in model:
        raise ValueError(f"model must be 'local/<served-name>' or 'anthropic/<model>', got {model!r}")
    return AgentSpec(model, instructions, workspace, thinking, description, masking, driver)


gate = GateSpec()


class _EffectFactory:
    """`effect.command(...)` and `effect.http(...)`: at-most-once side effects, run by the Run."""

    @staticmethod
    def command(argv: Sequence[str] | Callable[..., Sequence[str]], cwd: str | Callable[..., str] | None = None,
                timeout_s: float = 60.0, idempotent: bool = False) -> CommandEffect:
        return CommandEffect(argv, cwd, timeout_s, idempotent)

    @staticmethod
    def http(method: str, url: str | Callable[..., str], json: Any = None, timeout_s: float = 30.0,
             idempotent: bool = False) -> HttpEffect:
        return HttpEffect(method.upper(), url, json, timeout_s, idempotent)


effect = _EffectFactory()


def fail() -> FailSpec:
    return FailSpec()


ActorSpec = AgentSpec | GateSpec | EffectSpec | FailSpec
