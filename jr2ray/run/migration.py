"""Moving waiting runs to another Workflow version on purpose (`jr2ray migrate`).

A run moves when its last snapshot, with its state paths renamed by the operator's map (`old.path=new.path`), is a
snapshot of the new version: every active state, every invoked child's state and every timer's state exist there
(`jr2ray.chart.restore` decides, as a wake would). The plan is made for every run first; if any would not map, the
whole migration is refused with the list and why, and nothing is written. A moved run gets, in one transaction, a
`migration` entry (from, to, map), its mapped snapshot, and a notice for each open Turn and each seat's `continue`
conversation. After it every conversation starts afresh (`turns.conversation_key`): the Turn restarts on the new
version's Menu and reads that the workflow was updated, instead of changing mid-conversation unannounced; the old
transcript stays in the journal, never continued.

Only parked and queued runs move: a run live on a host now is refused (it parks when idle; run migrate again).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, Field

from jr2ray.authoring import AgentSpec, Jr2Machine
from jr2ray.chart import RestoreError, restore
from jr2ray.menu import allowed_picks
from jr2ray.menu.texts import allowed_line, workflow_moved

from . import telemetry, versions
from .gates import gate_views
from .models import RunStatus, Waiting
from .replay import replay
from .store import JournalStore, LedgerEntry, LedgerKind
from .turns import conversation_key


class Move(BaseModel):
    id: str
    from_version: str
    value: Any = None
    mapped: Any = None


class Refused(BaseModel):
    id: str
    from_version: str
    reason: str


class Plan(BaseModel):
    workflow: str
    to_version: str
    moves: list[Move] = Field(default_factory=list)
    refused: list[Refused] = Field(default_factory=list)


class MigrationRefused(Exception):
    """Some runs would not map: none was moved."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        lines = [f"  {r.id} (version {versions.short(r.from_version)}): {r.reason}" for r in plan.refused]
        super().__init__(f"{len(plan.refused)} run(s) of {plan.workflow} would not move to version "
                         f"{versions.short(plan.to_version)}; nothing was moved:\n" + "\n".join(lines))


def parse_map(pairs: list[str]) -> dict[str, str]:
    """`old.path=new.path` pairs (state paths without the machine id, as `value` shows them)."""
    out: dict[str, str] = {}
    for p in pairs:
        old, sep, new = p.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ValueError(f"--map {p!r} is not old.path=new.path")
        out[old.strip()] = new.strip()
    return out


def _rename(path: str, mapping: dict[str, str]) -> str:
    """A state path (or a state id: the machine id, a dot, the path) with the longest mapped prefix renamed."""
    for old in sorted(mapping, key=len, reverse=True):
        for pre in ("", f"{path.partition('.')[0]}."):
            full = pre + old
            if path == full or path.startswith(full + "."):
                return pre + mapping[old] + path[len(full):]
    return path


def map_snapshot(data: dict[str, Any], mapping: dict[str, str], machine_id: str) -> dict[str, Any]:
    """The persisted snapshot with every state path renamed: active and entered states, history, invoked children
    (their state, and their id when it is the state's id) and timers (their owning state, and their id)."""
    if not mapping:
        return copy.deepcopy(data)

    def ren(p: str) -> str:
        return _rename(p, mapping)

    def ren_id(i: str) -> str:  # an id made of a state id (`notes.writing.asking`, `xstate.after.500.<id>`)
        if i.startswith(f"{machine_id}."):
            return f"{machine_id}.{ren(i[len(machine_id) + 1:])}"
        head, sep, rest = i.rpartition(f".{machine_id}.")
        return head + sep + ren(rest) if sep else i

    out = copy.deepcopy(data)
    out["active"] = [ren(p) for p in out.get("active", [])]
    out["entered"] = [ren(p) for p in out.get("entered", []) or []]
    out["history"] = {ren(k): [ren(p) for p in v] for k, v in (out.get("history") or {}).items()}
    out["children"] = {ren_id(k): {**c, "id": ren_id(c["id"]), "state": ren(c["state"])}
                       for k, c in (out.get("children") or {}).items()}
    out["timers"] = {ren_id(k): {**t, "id": ren_id(t["id"]), "state": ren(t["state"]) if t.get("state") else None}
                     for k, t in (out.get("timers") or {}).items()}
    out.pop("value", None)  # recomputed from the active states by restore
    return out


def _check(machine: Jr2Machine, data: dict[str, Any]) -> str | None:
    """Why this snapshot is not one of `machine`'s, or None."""
    try:
        restore(machine.chart, data)
    except RestoreError as exc:
        return str(exc)
    for cid, c in (data.get("children") or {}).items():
        if c.get("status", "active") == "active" and c["src"] not in machine.actors and c["src"] != "gate":
            return f"invoked child {cid!r} runs {c['src']!r}, which the new version does not have"
    return None


def plan(store: JournalStore, workflow: str, to_version: str, machine: Jr2Machine, mapping: dict[str, str],
         from_version: str | None = None) -> tuple[Plan, dict[str, dict[str, Any] | None]]:
    """What a migration would do: each waiting run of `workflow` not on `to_version` moves or is refused (why).
    Also returns each moving run's mapped snapshot (None for a queued run, which has none yet)."""
    out = Plan(workflow=workflow, to_version=to_version)
    snaps: dict[str, dict[str, Any] | None] = {}
    for line in store.list_runs(status=["active", "queued"]):
        if line.workflow != workflow or line.version == to_version:
            continue
        if from_version and not line.version.startswith(from_version):
            continue
        if not line.version:
            out.refused.append(Refused(id=line.id, from_version="", reason="it was started before versions"))
            continue
        if line.status == "active" and store.standing(line.id) is None:
            out.refused.append(Refused(id=line.id, from_version=line.version,
                                       reason="it is live on a host now; migrate again once it parks"))
            continue
        j = store.open(line.id)
        try:
            latest = j.latest_snapshot()
        finally:
            j.close()
        if latest is None:
            snaps[line.id] = None
            out.moves.append(Move(id=line.id, from_version=line.version))
            continue
        mapped = map_snapshot(latest[1], mapping, machine.id)
        why = _check(machine, mapped)
        if why is not None:
            out.refused.append(Refused(id=line.id, from_version=line.version, reason=why))
            continue
        snaps[line.id] = mapped
        out.moves.append(Move(id=line.id, from_version=line.version, value=latest[1].get("value"),
                              mapped=restore(machine.chart, mapped).value))
    return out, snaps


def _notices(ledger: list[LedgerEntry], run_id: str, snap: dict[str, Any] | None,
             agents: set[str]) -> list[tuple[str, str | None, dict[str, Any]]]:
    """The notices a migration leaves. Each conversation starts afresh after it (`conversation_key`): the Turn open
    now restarts on the new version's Menu, and so does the next Turn of each seat with a `continue` conversation;
    each first reads the notices its old conversation had not read yet, then why its tools may differ."""
    moves = sum(1 for e in ledger if e.kind == LedgerKind.MIGRATION.value)
    r = replay(ledger)
    bases = [f"{run_id}:root:{a}" for a in sorted(agents)
             if conversation_key(f"{run_id}:root:{a}", moves) in r.transcripts]
    for c in (snap or {}).get("children", {}).values():
        if c.get("status", "active") == "active" and c["src"] in agents:
            bases += [f"{run_id}.t{c['seq']}", f"{run_id}:root:{c['src']}"]
    out: list[tuple[str, str | None, dict[str, Any]]] = []
    for base in dict.fromkeys(bases):
        new = conversation_key(base, moves + 1)
        for text in [*r.notices.get(conversation_key(base, moves), []), workflow_moved()]:
            out.append((LedgerKind.NOTICE.value, new, {"text": text}))
    return out


def apply(store: JournalStore, p: Plan, snaps: dict[str, dict[str, Any] | None], machine: Jr2Machine,
          mapping: dict[str, str]) -> None:
    """Move every run of the plan (call only when nothing was refused). Each run: one transaction under a fresh
    lease (a host that still held it is fenced), then its index line names the new version."""
    agents = {name for name, spec in machine.actors.items() if isinstance(spec, AgentSpec)}
    for mv in p.moves:
        j = store.open(mv.id)
        try:
            row = j.run()
            assert row is not None
            j.claim("jr2ray-migrate")
            entries: list[tuple[str, str | None, dict[str, Any]]] = [
                (LedgerKind.MIGRATION.value, None, {"from": mv.from_version, "to": p.to_version, "map": mapping,
                                                    "value": mv.value, "mapped": mv.mapped})]
            snap = snaps.get(mv.id)
            entries += _notices(j.load().ledger, mv.id, snap, agents)
            j.commit(machine.digest, row.status, snap, entries)
        finally:
            j.close()
        store.set_run_version(mv.id, p.to_version)
        telemetry.run_migrated(mv.id, p.workflow, mv.from_version, p.to_version, mv.value, mv.mapped, mapping)
        standing = store.standing(mv.id)
        if standing is not None:  # how it parked, now on the new version: its Turns' next surface read wakes it
            store.set_parked(mv.id, True, moved_standing(standing, machine, snap, mapping, p.to_version))


def moved_standing(standing: dict[str, Any], machine: Jr2Machine, snap: dict[str, Any] | None,
                   mapping: dict[str, str], to_version: str) -> dict[str, Any]:
    """How a parked run stands once moved, read from its mapped snapshot on the new version: its value, its open
    Gates (renamed by the map, with what the new version accepts), its Turns' states and Allowed picks, and so where
    it waits (`jr2ray runs` WHERE, `GET /gates`), all without waking it. Its timer keeps its due time."""
    status = copy.deepcopy(standing.get("status") or {})
    status.update(version=to_version, digest=machine.digest)
    for t in status.get("turns") or []:
        t["state"] = _rename(str(t.get("state", "")), mapping)
        if t.get("active"):
            t["unread_notices"] = True
    if snap is not None:
        restored = restore(machine.chart, snap)
        live = status.get("status") == "active"
        status["value"] = restored.value
        status["gates"] = [g.model_dump(mode="json") for g in gate_views(machine, restored)] if live else []
        for t in status.get("turns") or []:
            if t.get("active"):
                allowed = allowed_picks(machine, restored, t["state"]) if live else []
                t["allowed"], t["allowed_now"] = allowed, allowed_line(allowed)
    due = (standing.get("waiting") or {}).get("timer_due")
    waiting = Waiting.of(RunStatus.model_validate(status), due)
    return {**standing, "status": status, "waiting": waiting.model_dump(mode="json")}
