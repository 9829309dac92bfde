"""The Harness: runs one model conversation for an Agent slot, Turn by Turn, through a `RunPort`.

Ray lives only in `jr2ray.harness.actor`; import it explicitly. Everything here is pure asyncio.
"""

from jr2ray.harness.errors import Aborted, HarnessError, ProviderError, TurnOver, is_turn_over
from jr2ray.harness.port import RunPort
from jr2ray.harness.providers import (
    AnthropicProvider,
    OpenAICompatProvider,
    Provider,
    ProviderConfig,
    ProviderRegistry,
    split_model,
)
from jr2ray.harness.spec import Limits, TurnResult, TurnSpec
from jr2ray.harness.telemetry import RequestTelemetry, TelemetrySink
from jr2ray.harness.transcript import Message, ModelAnswer, ModelRequest, ToolCall
from jr2ray.harness.turn import Conversation

__all__ = [
    "Aborted",
    "AnthropicProvider",
    "Conversation",
    "HarnessError",
    "Limits",
    "Message",
    "ModelAnswer",
    "ModelRequest",
    "OpenAICompatProvider",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ProviderRegistry",
    "RequestTelemetry",
    "RunPort",
    "TelemetrySink",
    "ToolCall",
    "TurnOver",
    "TurnResult",
    "TurnSpec",
    "is_turn_over",
    "split_model",
]
