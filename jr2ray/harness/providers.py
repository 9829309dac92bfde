"""Model providers: OpenAI-compatible (vLLM) and Anthropic, behind one small `Provider` protocol.

Each provider renders the same neutral request byte-stably (H10) and reports the usage numbers that show the prompt
cache working (H12). No other module in jr2ray talks to a model client.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from jr2ray.harness.errors import HarnessError, ProviderError
from jr2ray.harness.presenters import (
    EPHEMERAL,
    anthropic_messages,
    anthropic_tools,
    openai_messages,
    openai_tools,
)
from jr2ray.harness.transcript import ModelAnswer, ModelRequest, Thinking, ToolCall
from jr2ray.settings import DEFAULT_LOCAL_BASE_URL, Settings, load_settings

ProviderKind = Literal["local", "anthropic"]

_THINKING_BUDGETS: dict[str, int] = {"low": 1024, "medium": 4096, "high": 16384}


class Provider(Protocol):
    """One model API. `complete` sends one request and returns one answer, or raises `ProviderError`."""

    kind: ProviderKind

    async def complete(self, request: ModelRequest) -> ModelAnswer: ...


class ProviderConfig(BaseModel):
    """Where the providers live and how they are called. Built from `jr2ray.settings.Settings`."""

    local_base_url: str = DEFAULT_LOCAL_BASE_URL
    local_api_key: str = "none"
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    max_tokens: int | None = Field(default=None, description="OpenAI-compatible max_tokens; None is the server's.")
    return_token_ids: bool = Field(
        default=False, description="Ask vLLM for the prompt's token ids, so a benchmark can compute what was reusable."
    )
    cache_salt: str | None = Field(
        default=None, description="vLLM cache_salt: requests share cached blocks only with the same salt."
    )
    anthropic_max_tokens: int = 4096
    temperature: float | None = None
    timeout_s: float = 600.0
    max_retries: int = 2

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> ProviderConfig:
        key = settings.anthropic_api_key
        values: dict[str, Any] = {
            "local_base_url": settings.local_base_url,
            "local_api_key": settings.local_api_key.get_secret_value(),
            "anthropic_api_key": key.get_secret_value() if key is not None else None,
            "anthropic_base_url": settings.anthropic_base_url,
            "return_token_ids": settings.return_token_ids,
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_env(cls, **overrides: Any) -> ProviderConfig:
        """The settings of this process as they are now (an actor calls it after its env is applied)."""
        return cls.from_settings(load_settings(), **overrides)


def split_model(model: str) -> tuple[ProviderKind, str]:
    """`local/<served-name>` or `anthropic/<model>` into its provider kind and the provider's own model name."""
    prefix, sep, name = model.partition("/")
    if not sep or not name:
        raise HarnessError(f"model {model!r} must be 'local/<served-name>' or 'anthropic/<model>'")
    if prefix == "local":
        return "local", name
    if prefix == "anthropic":
        return "anthropic", name
    raise HarnessError(f"model {model!r}: unknown provider {prefix!r} (expected 'local' or 'anthropic')")


def _masking_extra_body(allowed_tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Imported lazily: masking is opt-in, and its module is owned elsewhere."""
    from jr2ray.harness import masking

    return masking.masking_extra_body(allowed_tools)


class OpenAICompatProvider:
    """Chat Completions against an OpenAI-compatible server (vLLM), through the official async client."""

    kind: ProviderKind = "local"

    def __init__(
        self,
        base_url: str = DEFAULT_LOCAL_BASE_URL,
        api_key: str = "none",
        *,
        max_tokens: int | None = None,
        return_token_ids: bool = False,
        cache_salt: str | None = None,
        temperature: float | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 2,
        client: Any = None,
    ) -> None:
        if client is None:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries)
        self._client = client
        self._return_token_ids = return_token_ids
        self._cache_salt = cache_salt
        self._max_tokens = max_tokens
        self._temperature = temperature

    def build_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The create() arguments. Masking adds `extra_body` only; tools and messages stay byte-identical (H11)."""
        tools = openai_tools(request.tools)
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": openai_messages(request.system, request.messages),
        }
        if tools:
            kwargs["tools"] = tools
        if self._max_tokens is not None:
            kwargs["max_tokens"] = self._max_tokens
        if self._temperature is not None:
            kwargs["temperature"] = self._temperature
        extra_body: dict[str, Any] = {}
        if request.thinking is not None:
            extra_body["chat_template_kwargs"] = {"enable_thinking": bool(request.thinking)}
        if self._return_token_ids:
            extra_body["return_token_ids"] = True
        if self._cache_salt:
            extra_body["cache_salt"] = self._cache_salt
        if request.masked_tools:
            wanted = set(request.masked_tools)
            allowed_tools = [t for t in openai_tools(request.tools) if t["function"]["name"] in wanted]
            if allowed_tools:
                extra_body.update(_masking_extra_body(allowed_tools))
        if extra_body:
            kwargs["extra_body"] = extra_body
        if request.session:
            # Ray Serve's consistent-hash router pins a session to the replica that holds its prefix.
            kwargs["extra_headers"] = {"x-session-id": request.session}
        return kwargs

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        import openai

        try:
            resp = await self._client.chat.completions.create(**self.build_kwargs(request))
        except openai.APIStatusError as exc:
            raise ProviderError(str(exc), status_code=exc.status_code, provider="local") from exc
        except openai.APIError as exc:
            raise ProviderError(str(exc), provider="local") from exc
        if not resp.choices:
            raise ProviderError("the server answered with no choices", provider="local")
        choice = resp.choices[0]
        msg = choice.message
        calls: list[ToolCall] = []
        for i, tc in enumerate(msg.tool_calls or []):
            fn = getattr(tc, "function", None)
            if fn is None:
                continue
            calls.append(ToolCall(id=tc.id or f"call_{i}", name=fn.name, arguments=fn.arguments or ""))
        usage = resp.usage
        prompt_tokens = usage.prompt_tokens if usage is not None else None
        details = usage.prompt_tokens_details if usage is not None else None
        cached = details.cached_tokens if details is not None else None
        return ModelAnswer(
            text=msg.content,
            tool_calls=calls,
            finish_reason=choice.finish_reason,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached,
            prompt_token_ids=(getattr(resp, "prompt_token_ids", None)
                              or (resp.model_extra or {}).get("prompt_token_ids")),
            completion_token_ids=getattr(choice, "token_ids", None) or (choice.model_extra or {}).get("token_ids"),
        )


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
        """The create() arguments. Masking is ignored: Anthropic has no cache-safe subset form (ADR-0029)."""
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

        try:
            resp = await self._client.messages.create(**self.build_kwargs(request))
        except anthropic.APIStatusError as exc:
            raise ProviderError(str(exc), status_code=exc.status_code, provider="anthropic") from exc
        except anthropic.APIError as exc:
            raise ProviderError(str(exc), provider="anthropic") from exc
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
        )


class ProviderRegistry:
    """Resolves a Turn's `model` Dial to a provider, one client per provider kind, made on first use."""

    def __init__(self, config: ProviderConfig | None = None, providers: dict[str, Provider] | None = None) -> None:
        self.config = config if config is not None else ProviderConfig.from_env()
        self._providers: dict[str, Provider] = dict(providers or {})

    def resolve(self, model: str) -> tuple[Provider, str]:
        kind, name = split_model(model)
        provider = self._providers.get(kind)
        if provider is None:
            provider = self._make(kind)
            self._providers[kind] = provider
        return provider, name

    def _make(self, kind: ProviderKind) -> Provider:
        c = self.config
        if kind == "local":
            return OpenAICompatProvider(
                c.local_base_url,
                c.local_api_key,
                max_tokens=c.max_tokens,
                temperature=c.temperature,
                timeout_s=c.timeout_s,
                max_retries=c.max_retries,
                return_token_ids=c.return_token_ids,
                cache_salt=c.cache_salt,
            )
        return AnthropicProvider(
            c.anthropic_api_key,
            base_url=c.anthropic_base_url,
            max_tokens=c.anthropic_max_tokens,
            temperature=c.temperature,
            timeout_s=c.timeout_s,
            max_retries=c.max_retries,
        )
