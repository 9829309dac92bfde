"""What the official `openai` and `anthropic` clients have in common, kept once: both SDKs come from one generator,
so a failed call raises the same two error classes, and every provider takes the same call knobs from the config.
A provider module keeps only its own wire format (request arguments, answer fields, usage numbers)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TypedDict

from jr2ray.harness.errors import ProviderError

from .registry import ProviderConfig, ProviderKind


@contextmanager
def provider_errors(sdk: ModuleType, provider: ProviderKind) -> Iterator[None]:
    """Raise a failed SDK call as a `ProviderError` of `provider`, with the HTTP status when the server answered.

    The client has retried by then (`max_retries`), so the Turn treats what comes out of here as final."""
    try:
        yield
    except sdk.APIStatusError as exc:
        raise ProviderError(str(exc), status_code=exc.status_code, provider=provider) from exc
    except sdk.APIError as exc:
        raise ProviderError(str(exc), provider=provider) from exc


class CallOptions(TypedDict):
    """The keyword arguments every provider's constructor takes under these names."""

    temperature: float | None
    timeout_s: float
    max_retries: int


def call_options(c: ProviderConfig) -> CallOptions:
    """The knobs every provider reads from the config alike: temperature, and its client's timeout and retries."""
    return CallOptions(temperature=c.temperature, timeout_s=c.timeout_s, max_retries=c.max_retries)
