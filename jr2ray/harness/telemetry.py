"""Per-request telemetry (H12): what each model request cost and how much of it the provider's cache served."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import BaseModel, Field


class RequestTelemetry(BaseModel):
    """One model request. The Run collects these to show cache reuse per Turn."""

    run_id: str
    iid: str
    slot: str
    state: str
    turn: int = Field(description="1-based index of the Turn within its Conversation.")
    step: int = Field(description="1-based index of the model request within the Turn.")
    model: str
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = Field(default=None, description="Tokens the model generated (its answer).")
    latency_s: float
    error: str | None = Field(default=None, description="Set when the request failed.")
    kv_wait_s: float | None = Field(
        default=None, description="Turn admission: how long the request waited for room in the KV budget (None: off)."
    )
    kv_tokens: int | None = Field(
        default=None, description="Turn admission: the tokens it was admitted with (its prefix plus expected growth)."
    )
    tools_sha256: str | None = Field(
        default=None, description="SHA-256 of the tools block this request carried; one value per Conversation."
    )
    masked_tools: list[str] | None = Field(
        default=None, description="The picks decoding was constrained to (masking on a local model), else None."
    )
    prompt_token_ids: list[int] | None = Field(
        default=None, description="The prompt as the server tokenized it (only with ProviderConfig.return_token_ids)."
    )
    completion_token_ids: list[int] | None = Field(
        default=None, description="What the server generated, as tokens (only with ProviderConfig.return_token_ids)."
    )


TelemetrySink = Callable[[RequestTelemetry], Awaitable[None] | None]
