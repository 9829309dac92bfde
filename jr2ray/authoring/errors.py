"""Authoring errors: a Workflow that cannot load says which state and which name are wrong."""

from __future__ import annotations

from jr2ray.chart import ChartConfigError


class WorkflowError(ChartConfigError):
    """A Workflow refused at load (A6). The message names the state path and the offending name."""


class EventDefinitionError(WorkflowError):
    """A `define_event` call that cannot work (bad name, a `sender` field, a nested model)."""
