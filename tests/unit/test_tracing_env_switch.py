"""Tracing follows the environment a process is given: on with `OTEL_EXPORTER_OTLP_ENDPOINT`, off again with
OpenTelemetry's own `OTEL_SDK_DISABLED=true` (a host applies its pool's env, which may ask for either), while a
tracer a test installed is never turned off by the environment."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jr2ray.run import tracing


def test_the_env_turns_tracing_on_and_opentelemetrys_off_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    tracing.uninstall()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no span is sent
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    try:
        assert tracing.configure_from_env() and tracing.enabled()
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        assert not tracing.configure_from_env() and not tracing.enabled()
        assert tracing.rooted({"env": {}}, "r1", "notes") == {"env": {}}  # off: no root span, no traceparent
    finally:
        tracing.uninstall()


def test_a_tracer_a_test_installed_stays_when_the_env_says_off(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    tracing.install(exporter)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    try:
        assert tracing.configure_from_env() and tracing.enabled()
        assert "traceparent" in tracing.rooted({}, "r1", "notes")
    finally:
        tracing.uninstall()
