"""The provider registry: a Turn's `model` Dial (`<kind>/<name>`) names a provider kind, looked up here.

A new provider is one module that defines a class with `kind` and `complete`, and registers a factory that builds
it from the `ProviderConfig` (one built on a Stainless-generated SDK, as both built-ins are, maps its errors with
`sdk.provider_errors` and takes `sdk.call_options` from the config). Each provider renders the same neutral
request byte-stably (H10) and reports the usage numbers that show the prompt cache working (H12). No module outside
`jr2ray.harness.providers` talks to a model client.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Protocol

from pydantic import BaseModel, Field

from jr2ray.harness.errors import HarnessError
from jr2ray.harness.masking import Bounds
from jr2ray.harness.transcript import ModelAnswer, ModelRequest
from jr2ray.settings import DEFAULT_LOCAL_BASE_URL, Settings, load_settings

ProviderKind = str
"""The prefix of a `model` Dial: `local`, `anthropic`, or any kind registered with `register_provider`."""


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
    masking_caps: Bounds = Field(
        default_factory=Bounds,
        description="Caps masking adds to open strings, arrays and numbers: set only by a random model's profile.",
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
            "masking_caps": Bounds.model_validate(settings.masking_caps or {}),
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_env(cls, **overrides: Any) -> ProviderConfig:
        """The settings of this process as they are now (an actor calls it after its env is applied)."""
        return cls.from_settings(load_settings(), **overrides)


ProviderFactory = Callable[[ProviderConfig], Provider]

_FACTORIES: dict[str, ProviderFactory] = {}


def register_provider(kind: ProviderKind, factory: ProviderFactory) -> None:
    """Make `<kind>/<name>` models resolvable. A second, different factory for a kind is a mistake, so it raises."""
    if "/" in kind or not kind:
        raise ValueError(f"provider kind {kind!r} must be a non-empty word without '/'")
    held = _FACTORIES.get(kind)
    if held is not None and held is not factory:
        raise ValueError(f"provider kind {kind!r} is already registered to {held!r}")
    _FACTORIES[kind] = factory


def provider_kinds() -> list[ProviderKind]:
    return sorted(_FACTORIES)


def split_model(model: str, also: Collection[str] = ()) -> tuple[ProviderKind, str]:
    """`<kind>/<name>` (e.g. `local/<served-name>`, `anthropic/<model>`) into a known kind and the provider's own
    model name. Known: registered, or in `also` (providers a registry was handed ready-made)."""
    prefix, sep, name = model.partition("/")
    kinds = sorted({*_FACTORIES, *also})
    if not sep or not name:
        raise HarnessError(f"model {model!r} must be '<provider>/<model>', with provider one of {kinds}")
    if prefix not in kinds:
        raise HarnessError(f"model {model!r}: unknown provider {prefix!r} (expected one of {kinds})")
    return prefix, name


class ProviderRegistry:
    """Resolves a Turn's `model` Dial to a provider, one client per provider kind, made on first use."""

    def __init__(self, config: ProviderConfig | None = None, providers: dict[str, Provider] | None = None) -> None:
        self.config = config if config is not None else ProviderConfig.from_env()
        self._providers: dict[str, Provider] = dict(providers or {})

    def resolve(self, model: str) -> tuple[Provider, str]:
        kind, name = split_model(model, also=self._providers)
        provider = self._providers.get(kind)
        if provider is None:
            provider = _FACTORIES[kind](self.config)
            self._providers[kind] = provider
        return provider, name
