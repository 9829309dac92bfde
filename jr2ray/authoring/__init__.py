"""The authoring surface: jr2_setup, define_event, agent, gate, effect, fail, answer, sent_by (A1-A9)."""

from jr2ray.chart import and_, assign, cancel, log, not_, or_, raise_, send_parent, send_to, state_in

from .actions import AnswerAction, AnswerEffect, SentBy, answer, sent_by
from .actors import (TURN_INPUT_KEYS, ActorSpec, AgentSpec, CommandEffect, EffectSpec, FailSpec, GateSpec, HttpEffect,
                     agent, effect, fail, gate)
from .errors import EventDefinitionError, WorkflowError
from .events import BadArguments, EventDef, define_event, is_mechanism
from .models import MenuItem, Sender
from .setup import Jr2Machine, Setup, jr2_setup
from .structure import PartyRef, Structure

__all__ = [
    "ActorSpec", "AgentSpec", "AnswerAction", "AnswerEffect", "BadArguments", "CommandEffect", "EffectSpec", "EventDef",
    "EventDefinitionError", "FailSpec", "GateSpec", "HttpEffect", "Jr2Machine", "MenuItem", "PartyRef", "Sender",
    "SentBy", "Setup", "Structure", "TURN_INPUT_KEYS", "WorkflowError", "agent", "and_", "answer", "assign", "cancel",
    "define_event", "effect", "fail", "gate", "is_mechanism", "jr2_setup", "log", "not_", "or_", "raise_",
    "send_parent", "send_to", "sent_by", "state_in",
]
