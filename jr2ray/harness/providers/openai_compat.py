"""The `local` provider: Chat Completions against an OpenAI-compatible server (vLLM), via the official client."""

from __future__ import annotations

from typing import Any

from jr2ray.harness.errors import ProviderError
from jr2ray.harness.masking import Bounds
from jr2ray.harness.presenters import openai_messages, openai_tools
from jr2ray.harness.transcript import ModelAnswer, ModelRequest, ToolCall
from jr2ray.menu.render import OPENAI

from .registry import DEFAULT_LOCAL_BASE_URL, ProviderConfig, ProviderKind, register_provider
from .sdk import call_options, provider_errors


def _masking_extra_body(allowed_tools: list[dict[str, Any]], bounds: Bounds) -> dict[str, Any]:
    """Looked up at call time, so a test can stand in for the regex builder."""
    from jr2ray.harness import masking

    return masking.masking_extra_body(allowed_tools, bounds)


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
        masking_caps: Bounds | None = None,
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
        self._masking_caps = masking_caps or Bounds()

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
                extra_body.update(_masking_extra_body(allowed_tools, self._masking_caps))
        if extra_body:
            kwargs["extra_body"] = extra_body
        if request.session:
            # Ray Serve's consistent-hash router pins a session to the replica that holds its prefix.
            kwargs["extra_headers"] = {"x-session-id": request.session}
        return kwargs

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        import openai

        with provider_errors(openai, self.kind):
            resp = await self._client.chat.completions.create(**self.build_kwargs(request))
        if not resp.choices:
            raise ProviderError("the server answered with no choices", provider=self.kind)
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
            completion_tokens=usage.completion_tokens if usage is not None else None,
            prompt_token_ids=(getattr(resp, "prompt_token_ids", None)
                              or (resp.model_extra or {}).get("prompt_token_ids")),
            completion_token_ids=getattr(choice, "token_ids", None) or (choice.model_extra or {}).get("token_ids"),
        )


def from_config(c: ProviderConfig) -> OpenAICompatProvider:
    return OpenAICompatProvider(
        c.local_base_url,
        c.local_api_key,
        max_tokens=c.max_tokens,
        return_token_ids=c.return_token_ids,
        cache_salt=c.cache_salt,
        masking_caps=c.masking_caps,
        **call_options(c),
    )


register_provider(OpenAICompatProvider.kind, from_config, tools=OPENAI)
