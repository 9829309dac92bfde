"""The provider-neutral transcript of a conversation, and what one model request and answer carry.

A Conversation keeps only these records and appends to them. Each provider renders them to its wire format with a
pure function of one record at a time, so a rendered request is always a prefix of the next (H6).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jr2ray.menu.models import MenuItem, Thinking

__all__ = ["Message", "ModelAnswer", "ModelRequest", "Thinking", "ToolCall"]


class ToolCall(BaseModel):
    """One tool call as the model wrote it. `arguments` is kept as the raw JSON text so replays are byte-exact."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str


class Message(BaseModel):
    """One transcript entry. `extra` holds provider-only replay data (e.g. Anthropic thinking blocks)."""

    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ModelRequest(BaseModel):
    """Everything one provider call needs. `tools` are the Menu plus Working tools, fixed per conversation."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = Field(description="The served model name, without the provider prefix.")
    system: str
    tools: list[MenuItem]
    messages: list[Message]
    thinking: Thinking = None
    masked_tools: list[str] | None = Field(
        default=None, description="Names decoding is constrained to (masking, vLLM only); None means unconstrained."
    )
    session: str | None = Field(
        default=None, description="The conversation's key, sent as x-session-id so a router keeps it on one replica."
    )


USAGE = ("prompt_tokens", "cached_tokens", "completion_tokens", "prompt_token_ids", "completion_token_ids")
"""The usage numbers an answer carries and a telemetry row copies; a provider fills them from its own wire format."""


class ModelAnswer(BaseModel):
    """One model answer, reduced to what the turn loop acts on, plus usage for telemetry."""

    text: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_token_ids: list[int] | None = Field(
        default=None, description="The server's own prompt tokens, when asked for (measurement only)."
    )
    completion_token_ids: list[int] | None = Field(
        default=None, description="The tokens the server generated, when asked for (the cache keeps them too)."
    )

    def usage(self) -> dict[str, Any]:
        """What telemetry takes from an answer (H12): the fields of `USAGE`, which a `RequestTelemetry` row has
        under the same names."""
        return {name: getattr(self, name) for name in USAGE}

    def as_message(self) -> Message:
        """The assistant entry appended to the transcript."""
        return Message(role="assistant", content=self.text, tool_calls=tuple(self.tool_calls), extra=self.extra)
