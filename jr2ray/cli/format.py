"""What the CLI prints: progress on stderr, results as JSON or tables on stdout, one line per run activity."""

from __future__ import annotations

import json
import sys
from typing import Any


def say(*parts: Any) -> None:
    """Progress and activity, on stderr, so stdout stays the command's result."""
    print(*parts, file=sys.stderr, flush=True)


def out(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str), flush=True)


def activity(kind: str, data: dict[str, Any]) -> str | None:
    """One line of a run's activity for the terminal (None: nothing worth a line)."""
    if kind == "status":
        gates = ", ".join(f"{g['id']} accepts {g['accepts_now']}" for g in data.get("gates", []))
        return f"status {data.get('status')} value={json.dumps(data.get('value'))}" + (f"  gates: {gates}" if gates
                                                                                        else "")
    if kind == "turn":
        return f"turn {data.get('iid')} ({data.get('slot')} at {data.get('state')}) " + (
            "started" if data.get("active") else "ended")
    if kind == "pick":
        return f"pick {data.get('iid')}: {data.get('name')} {json.dumps(data.get('args'))}"
    if kind == "receipt":
        bits = [f"moved={data.get('moved')}", f"turn_complete={data.get('turn_complete')}"]
        if data.get("refused"):
            bits.append(f"refused={data.get('refused')}")
        if data.get("answer"):
            bits.append(f"answer={json.dumps(data.get('answer'))}")
        return f"receipt {data.get('iid')}: {data.get('pick')} " + " ".join(bits)
    if kind == "gate":
        if "event" in data:
            return f"gate {data.get('id')}: {data.get('event')} {json.dumps(data.get('args'))}"
        return f"gate {data.get('id')} " + ("open " + json.dumps(data.get("meta")) if data.get("open") else "closed")
    if kind == "timer":
        return f"timer fired: {data.get('event')}"
    if kind == "park":
        return "parked"
    if kind == "telemetry":
        return (f"model request {data.get('iid')} step {data.get('step')}: prompt {data.get('prompt_tokens')} "
                f"cached {data.get('cached_tokens')}")
    return None


def setting_description(name: str) -> str:
    """What a setting does, as its field declares it (`<kind>.<field>` for a provider's section, the kept config's
    for what only `up` takes); "" if none."""
    from jr2ray.instance_config import InstanceConfig
    from jr2ray.settings import Settings, settings_sections

    kind, _, field = name.partition(".")
    fields = settings_sections()[kind].model_fields if field and kind in settings_sections() else Settings.model_fields
    found = fields.get(field or name) or InstanceConfig.model_fields.get(name)
    return (found.description or "") if found is not None else ""


def settings_table(rows: list[dict[str, Any]]) -> str:
    """`jr2ray settings`: env name, effective value (secrets already masked), source; then what it does."""
    width = max(len(r["env"]) for r in rows) + 2
    lines = []
    for r in rows:
        value = r["value"]
        shown = ",".join(value) if isinstance(value, list) else ("" if value is None else str(value))
        lines.append(f"{r['env']:<{width}}{shown or '-':<40} {r['source']}")
        if r.get("description"):
            lines.append(f"    {r['description']}")
    return "\n".join(lines)


def up_banner(api: str, ray_address: str, temp_dir: str | None, token: str, token_file: str, created: bool) -> str:
    lines = [f"jr2ray is up: API {api}  Console {api}/  docs {api}/docs",
             f"Ray: {ray_address}" + (f" (temp dir {temp_dir})" if temp_dir else "")]
    if created:
        lines += [f"instance token (shown once; stored in {token_file}, mode 0600):", f"  {token}"]
    else:
        lines.append(f"instance token: in {token_file}")
    return "\n".join(lines)


def print_workflows(names: list[str], modules: list[str]) -> None:
    """Each workflow's seats and load-time warnings, as `up` shows them; one broken workflow does not hide others."""
    from jr2ray.run.catalog import load_workflow

    for name in names:
        try:
            m = load_workflow(name, modules)
        except Exception as exc:  # noqa: BLE001 - one broken workflow file must not hide the others
            print(f"\nworkflow {name!r} failed to load: {exc}")
            continue
        print()
        print(m.seats_text())  # type: ignore[attr-defined]
        for w in m.warnings:
            print(f"  warning: {w}")


def no_model_served(base_url: str, workflows: list[str]) -> str:
    """`up` without --llm, when Agents of these workflows are played by the Harness with a `local/` model."""
    return (f"warning: no model is served: `up` ran without --llm and JR2RAY_LOCAL_BASE_URL is unset, so the Harness "
            f"calls {base_url}, where nothing serves a model. Runs of {', '.join(workflows)} will fault at their "
            f"first model call (their error says so). Serve one with `jr2ray up --llm cpu`, or set "
            f"JR2RAY_LOCAL_BASE_URL to an OpenAI-compatible server.")


def no_harness(launcher: str, workflows: list[str]) -> str:
    """`up --launcher none` (or "auto" without the Harness), when these workflows have seats the Harness would play."""
    return (f"note: runs here start no Harness (--launcher {launcher}), so nothing calls a model: the Agent seats "
            f"the Harness would play (in {', '.join(workflows)}) wait for a driver to play them over surface/pick "
            f"(jr2ray.connect() starts runs the same way; see jr2ray.testing.ScriptedAgent).")


def admission_on(app: str, llm: str) -> str:
    """`up` with Turn admission on: one line, so the operator knows a run's model requests may wait for room in the
    KV cache, how to turn it off, and where to look. Without `--llm` nothing here creates the budget."""
    if llm == "none":
        return (f"Turn admission: on (kept; `jr2ray up --turn-admission off` turns it off), but this `up` deploys no "
                f"LLM app, so no KV budget {app!r} is made here: a Harness Turn without one faults (`jr2ray status` "
                f"shows whether one exists)")
    return (f"Turn admission: on (kept; `jr2ray up --turn-admission off` turns it off): each model request waits for "
            f"room in the KV budget of {app!r}; `jr2ray status` shows it")
