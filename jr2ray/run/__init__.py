"""The Run: delivery, Rest, outstanding picks, Chain, Gates, Effects, journal and restore (D1-D12, R1-R6).

`LocalRun` runs in-process without Ray; the Ray pieces (RunActor, connect) load on first use so the pure tiers
never import Ray.
"""

from typing import Any

from .catalog import ENTRY_POINT_GROUP, list_workflows, load_workflow
from .engine import RunEngine, TurnLauncher
from .errors import (
    BadRequest,
    CatalogError,
    Conflict,
    InstanceDown,
    RunCorrupt,
    RunDrifted,
    RunEnded,
    RunError,
    RunFenced,
    RunLost,
    UnknownGate,
    UnknownRun,
    UnknownTurn,
    UnknownWorkflow,
)
from .local import LocalRun
from .models import GateView, RunStatus, SendResult, Transcript, TranscriptEntry, TurnSpec, TurnView
from .store import JournalStore, RunJournal, Store


def connect(*args: Any, **kwargs: Any) -> Any:
    from .client import connect as _connect

    return _connect(*args, **kwargs)


__all__ = [
    "ENTRY_POINT_GROUP",
    "BadRequest",
    "CatalogError",
    "Conflict",
    "GateView",
    "InstanceDown",
    "JournalStore",
    "LocalRun",
    "RunCorrupt",
    "RunDrifted",
    "RunEnded",
    "RunEngine",
    "RunError",
    "RunFenced",
    "RunJournal",
    "RunLost",
    "RunStatus",
    "SendResult",
    "Store",
    "Transcript",
    "TranscriptEntry",
    "TurnLauncher",
    "TurnSpec",
    "TurnView",
    "UnknownGate",
    "UnknownRun",
    "UnknownTurn",
    "UnknownWorkflow",
    "connect",
    "list_workflows",
    "load_workflow",
]
