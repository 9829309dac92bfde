"""Model providers, a registry keyed by the `model` Dial's prefix: `local` (OpenAI-compatible, vLLM) and
`anthropic`. Every module of this package is imported here, and each registers its kind when imported, so a new
provider is one module that calls `register_provider`, with no edit here or anywhere else."""

import importlib
import pkgutil

from .anthropic import AnthropicProvider, AnthropicSettings
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

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "DEFAULT_LOCAL_BASE_URL", "AnthropicProvider", "AnthropicSettings", "OpenAICompatProvider", "Provider",
    "ProviderConfig", "ProviderFactory", "ProviderKind", "ProviderRegistry", "provider_kinds", "register_provider",
    "split_model",
]
