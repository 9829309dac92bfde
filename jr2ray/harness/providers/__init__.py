"""Model providers, a registry keyed by the `model` Dial's prefix: `local` (OpenAI-compatible, vLLM) and
`anthropic`. The built-ins register on import; a new provider is one module that calls `register_provider`."""

from . import anthropic, openai_compat  # noqa: F401  (each registers its kind)
from .anthropic import AnthropicProvider
from .openai_compat import OpenAICompatProvider
from .registry import (
                       DEFAULT_LOCAL_BASE_URL,
                       Provider,
                       ProviderConfig,
                       ProviderFactory,
                       ProviderKind,
                       ProviderRegistry,
                       provider_kinds,
                       register_provider,
                       split_model,
)

__all__ = [
    "DEFAULT_LOCAL_BASE_URL", "AnthropicProvider", "OpenAICompatProvider", "Provider", "ProviderConfig",
    "ProviderFactory", "ProviderKind", "ProviderRegistry", "provider_kinds", "register_provider", "split_model",
]
