"""The provider registry: a Turn's `model` Dial (`<kind>/<name>`) names a provider kind, looked up here.

A new provider is one module: a class with `kind` and `complete`, and one `register_provider(kind, factory,
tools=..., settings=...)` call, which also declares what the lower layers need from it: its model prefix and
tool format (`jr2ray.authoring.providers`, `jr2ray.menu.render`) and its settings section (`jr2ray.settings`).
The factory builds the provider from the `ProviderConfig`, reading its section with `config.section(...)`. One
built on a Stainless-generated SDK, as both built-ins are, maps its errors with `sdk.provider_errors` and takes
`sdk.call_options` from the config. Each provider renders the same neutral request byte-stably (H10) and reports
the usage numbers that show the prompt cache working (H12). No module outside `jr2ray.harness.providers` talks
to a model client; `providers/__init__.py` imports every module of the package, so a new file there needs no edit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, Field

from jr2ray.authoring.providers import declare_model_prefix
from jr2ray.harness.errors import HarnessError
from jr2ray.harness.masking import Bounds
from jr2ray.harness.transcript import ModelAnswer, ModelRequest
from jr2ray.menu.render import OPENAI, ToolFormat, register_tool_format
from jr2ray.settings import (
    DEFAULT_LOCAL_BASE_URL,
    ProviderSettings,
    Settings,
    register_settings_section,
    settings_sections,
)

ProviderKind = str
"""The prefix of a `model` Dial: `local`, `anthropic`, or any kind registered with `register_provider`."""


class Provider(Protocol):
    """One model API. `complete` sends one request and returns one answer, or raises `ProviderError`."""

    kind: ProviderKind

    async def complete(self, request: ModelRequest) -> ModelAnswer: ...


S = TypeVar("S", bound=BaseModel)


class ProviderConfig(BaseModel):
    """Where the providers live and how they are called. Built from `jr2ray.settings.Settings`.

    The `local` provider's fields are flat (its server is the model the instance itself serves, which `up` and the
    API read too); every other provider's settings travel in `sections`, plain values by kind, as its settings
    section declared them."""

    local_base_url: str = DEFAULT_LOCAL_BASE_URL
    local_api_key: str = "none"
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
    temperature: float | None = None
    timeout_s: float = 600.0
    max_retries: int = 2
    sections: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Each provider's own settings by kind (`register_provider(settings=)`).")

    def section(self, kind: ProviderKind, model: type[S]) -> S:
        """Provider `kind`'s settings as `model`; a kind this config carries nothing for gets the defaults."""
        return model.model_validate(self.sections.get(kind, {}))

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> ProviderConfig:
        values: dict[str, Any] = {
            "local_base_url": settings.local_base_url,
            "local_api_key": settings.local_api_key.get_secret_value(),
            "return_token_ids": settings.return_token_ids,
            "masking_caps": Bounds.model_validate(settings.masking_caps or {}),
            "sections": {kind: settings.section(kind).model_dump() for kind in settings_sections()},
        }
        values.update(overrides)
        return cls(**values)


ProviderFactory = Callable[[ProviderConfig], Provider]

_FACTORIES: dict[str, ProviderFactory] = {}


def register_provider(kind: ProviderKind, factory: ProviderFactory, *, tools: ToolFormat = OPENAI,
                      settings: type[ProviderSettings] | None = None) -> None:
    """Make `<kind>/<name>` models resolvable: their Menu rendered in `tools`, their settings read as `settings`
    (shown by `jr2ray settings`, handed to the factory in `ProviderConfig.sections`). A second, different
    factory for a kind is a mistake, so it raises, and so does a format or section at odds with one declared."""
    if "/" in kind or not kind:
        raise ValueError(f"provider kind {kind!r} must be a non-empty word without '/'")
    held = _FACTORIES.get(kind)
    if held is not None and held is not factory:
        raise ValueError(f"provider kind {kind!r} is already registered to {held!r}")
    register_tool_format(tools)
    declare_model_prefix(kind, tools.name)
    if settings is not None:
        register_settings_section(kind, settings)
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

    def __init__(self, config: ProviderConfig, providers: dict[str, Provider] | None = None) -> None:
        """`config`: from the settings its entry point read (the Harness actor's, the launcher's, a test's)."""
        self.config = config
        self._providers: dict[str, Provider] = dict(providers or {})

    def resolve(self, model: str) -> tuple[Provider, str]:
        kind, name = split_model(model, also=self._providers)
        provider = self._providers.get(kind)
        if provider is None:
            provider = _FACTORIES[kind](self.config)
            self._providers[kind] = provider
        return provider, name
