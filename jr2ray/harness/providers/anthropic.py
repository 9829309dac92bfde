"""The `anthropic` provider: the Messages API, with cache breakpoints on the last tool, the system prompt and the
newest block."""

from __future__ import annotations

import json
from typing import Any

from pydantic import AliasChoices, Field, SecretStr

from jr2ray.harness.presenters import EPHEMERAL, anthropic_messages, anthropic_tools
from jr2ray.harness.transcript import ModelAnswer, ModelRequest, Thinking, ToolCall
from jr2ray.menu.render import ANTHROPIC
from jr2ray.settings import ProviderSettings

from .registry import ProviderConfig, ProviderKind, register_provider
from .sdk import call_options, provider_errors

_THINKING_BUDGETS: dict[str, int] = {"low": 1024, "medium": 4096, "high": 16384}


def _anthropic_thinking(thinking: Thinking) -> int | None:
    if thinking is None or thinking is False:
        return None
    if thinking is True:
        return _THINKING_BUDGETS["medium"]
    if isinstance(thinking, int):
        return max(1024, thinking)
    return _THINKING_BUDGETS[thinking]


def _anthropic_block(block: Any) -> dict[str, Any] | None:
    """An answer block as it must be replayed: only the fields the API accepts back."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return None


class AnthropicProvider:
    """Anthropic Messages API, with cache breakpoints on the last tool, the system prompt and the newest block."""

    kind: ProviderKind = "anthropic"

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        max_tokens: int = 4096,
        temperature: float | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 2,
        client: Any = None,
    ) -> None:
        if client is None:
            from anthropic import AsyncAnthropic

            client = AsyncAnthropic(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries)
        self._client = client
        self._max_tokens = max_tokens
        self._temperature = temperature

    def build_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The create() arguments. Masking is ignored: Anthropic has no cache-safe subset form (H11)."""
        kwargs: dict[str, Any] = {
            "model": request.model,
            "max_tokens": self._max_tokens,
            "system": [{"type": "text", "text": request.system, "cache_control": dict(EPHEMERAL)}],
            "messages": anthropic_messages(request.messages),
        }
        tools = anthropic_tools(request.tools)
        if tools:
            kwargs["tools"] = tools
        budget = _anthropic_thinking(request.thinking)
        if budget is not None:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
            kwargs["max_tokens"] = max(self._max_tokens, budget + 1024)
        elif self._temperature is not None:
            kwargs["temperature"] = self._temperature
        return kwargs

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        import anthropic

        with provider_errors(anthropic, self.kind):
            resp = await self._client.messages.create(**self.build_kwargs(request))
        texts: list[str] = []
        calls: list[ToolCall] = []
        replay: list[dict[str, Any]] = []
        for block in resp.content:
            plain = _anthropic_block(block)
            if plain is None:
                continue
            replay.append(plain)
            if plain["type"] == "text":
                texts.append(plain["text"])
            elif plain["type"] == "tool_use":
                calls.append(ToolCall(id=plain["id"], name=plain["name"], arguments=json.dumps(plain["input"])))
        usage = resp.usage
        read = usage.cache_read_input_tokens or 0
        created = usage.cache_creation_input_tokens or 0
        return ModelAnswer(
            text="".join(texts) or None,
            tool_calls=calls,
            extra={"anthropic_content": replay} if replay else {},
            finish_reason=resp.stop_reason,
            prompt_tokens=usage.input_tokens + read + created,
            cached_tokens=usage.cache_read_input_tokens,
            completion_tokens=usage.output_tokens,
        )


class AnthropicSettings(ProviderSettings):
    """The `anthropic` provider's settings (`jr2ray settings` lists them as `anthropic.<field>`)."""

    api_key: SecretStr | None = Field(default=None, validation_alias=AliasChoices("ANTHROPIC_API_KEY"),
                                      description="Key for `anthropic/...` models.")
    base_url: str | None = Field(default=None, validation_alias=AliasChoices("ANTHROPIC_BASE_URL"),
                                 description="Anthropic API base URL (default: the SDK's).")
    max_tokens: int = Field(default=4096, gt=0, validation_alias=AliasChoices("JR2RAY_ANTHROPIC_MAX_TOKENS"),
                            description="max_tokens of each request (raised to fit a thinking budget).")


def from_config(c: ProviderConfig) -> AnthropicProvider:
    s = c.section(AnthropicProvider.kind, AnthropicSettings)
    return AnthropicProvider(
        s.api_key.get_secret_value() if s.api_key is not None else None,
        base_url=s.base_url,
        max_tokens=s.max_tokens,
        **call_options(c),
    )


register_provider(AnthropicProvider.kind, from_config, tools=ANTHROPIC, settings=AnthropicSettings)
