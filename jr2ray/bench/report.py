"""The bench's arithmetic, verdicts and outputs: per-request rows, per-arm summaries, ratios, markdown, JSON, PNG.

Pure except for writing files: everything here works from the requests a pass recorded.
"""

from __future__ import annotations

import json
import statistics
from itertools import pairwise
from pathlib import Path
from typing import Any

from serve.llm import reusable_per_request


def measure(rows: list[dict[str, Any]], block: int) -> list[dict[str, Any]]:
    """Per request: prompt, cached, and the reusable maximum given everything this arm sent (and got) before it.

    The reusable maximum is floor((shared prefix - 1) / block) * block against the best earlier request of the same
    arm (vLLM also keeps the blocks of what it generated, minus the last sampled token).
    """
    best = reusable_per_request([(r.get("prompt_token_ids"), r.get("completion_token_ids")) for r in rows], block)
    return [{"i": r.get("i", i + 1), "prompt": r.get("prompt_tokens") or 0, "cached": r.get("cached_tokens") or 0,
             "reusable": best[i], "ttft_s": r.get("ttft_s"), "tools_sha": r.get("tools_sha")}
            for i, r in enumerate(rows)]


def summarize(workflow: str, arm: str, status: str, reqs: list[dict[str, Any]],
              fixed_reusable: int | None = None) -> dict[str, Any]:
    """One arm's row. `fixed_reusable` is the fixed arm's reusable total: the same conversation with stable bytes."""
    prompt = sum(r["prompt"] for r in reqs)
    cached = sum(r["cached"] for r in reqs)
    reusable = sum(r["reusable"] or 0 for r in reqs)
    later = reqs[1:]
    at_max = [r for r in later if r["reusable"] is not None and r["cached"] == r["reusable"]]
    ttft = [r["ttft_s"] for r in reqs if r["ttft_s"] is not None]
    return {"workflow": workflow, "arm": arm, "status": status, "requests": len(reqs),
            "prompt_tokens": prompt, "cached_tokens": cached, "prefilled_tokens": prompt - cached,
            "last_prompt_tokens": reqs[-1]["prompt"] if reqs else 0,
            "reusable_max": reusable, "cached_of_reusable": cached / reusable if reusable else None,
            "cached_of_fixed_reusable": cached / fixed_reusable if fixed_reusable else None,
            "hit_rate": cached / prompt if prompt else 0.0,
            "at_reusable_max": f"{len(at_max)}/{len(later)}",
            "distinct_tools_blocks": len({r["tools_sha"] for r in reqs if r["tools_sha"]}),
            "ttft_p50_s": statistics.median(ttft) if ttft else None}


def narrowed_changes(reqs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(previous, request) pairs where the tools block changed between consecutive requests."""
    return [(prev, r) for prev, r in pairwise(reqs) if r["tools_sha"] != prev["tools_sha"]]


def check(arm: str, reqs: list[dict[str, Any]], block: int) -> list[str]:
    """The suite's own assertions on one arm. Each failure is a line; an empty list passes."""
    problems: list[str] = []
    if arm in ("fixed", "fixed+masking"):
        if len({r["tools_sha"] for r in reqs}) != 1:
            problems.append(f"{arm} arm: the tools block bytes changed between requests")
        for r in reqs[1:]:
            if r["reusable"] is None:
                problems.append(f"{arm} arm: request {r['i']} has no prompt token ids to check against")
            elif r["cached"] != r["reusable"]:
                problems.append(f"{arm} arm: request {r['i']} cached {r['cached']} != reusable max {r['reusable']}")
    if arm == "narrowed":
        # A continuing conversation reuses all of its previous prompt's full blocks; after a tools change the hit
        # must stop at the change, at least one whole block short of that.
        changes = narrowed_changes(reqs)
        if changes:
            prev, r = changes[0]
            continuing = (prev["prompt"] // block) * block
            if r["cached"] + block > continuing:
                problems.append(f"narrowed arm: request {r['i']} still hit {r['cached']}/{r['prompt']} after its "
                                f"tools changed (a continuing prompt would reuse {continuing}); the measurement "
                                f"cannot tell a miss")
    return problems


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratios(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workflow: fixed/narrowed and fixed/reordered, for cached tokens, prefilled tokens and TTFT median."""
    out = []
    for wf in dict.fromkeys(s["workflow"] for s in summaries):
        by = {s["arm"]: s for s in summaries if s["workflow"] == wf}
        fixed = by.get("fixed")
        if fixed is None:
            continue
        row: dict[str, Any] = {"workflow": wf}
        for other in ("narrowed", "reordered"):
            o = by.get(other)
            if o is None:
                continue
            row[f"cached fixed/{other}"] = _ratio(fixed["cached_tokens"], o["cached_tokens"])
            row[f"prefilled fixed/{other}"] = _ratio(fixed["prefilled_tokens"], o["prefilled_tokens"])
            row[f"ttft_p50 fixed/{other}"] = _ratio(fixed["ttft_p50_s"], o["ttft_p50_s"])
        out.append(row)
    return out


VALID_FIRST_CALLS = ("pick", "working")
VERDICTS = ("pick", "working", "no_call", "not_allowed", "bad_args")


def first_picks_rows(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per workflow and mode: how the sampled first calls fared, and the share that is an Allowed pick or a
    Working tool with valid arguments."""
    rows = []
    for wf, by_mode in results.items():
        for mode, reqs in by_mode.items():
            row: dict[str, Any] = {"workflow": wf, "decoding": mode, "requests": len(reqs)}
            for verdict in VERDICTS:
                row[verdict] = sum(1 for r in reqs if r.get("verdict") == verdict)
            valid = row["pick"] + row["working"]
            row["valid_share"] = valid / len(reqs) if reqs else None
            picks = sum(1 for r in reqs if r.get("first_call") in (r.get("allowed") or []))
            row["pick_valid_share"] = row["pick"] / picks if picks else None
            rows.append(row)
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value)


def _table(rows: list[dict[str, Any]], cols: list[str]) -> list[str]:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return lines


SUMMARY_COLS = ["workflow", "arm", "status", "requests", "prompt_tokens", "cached_tokens", "prefilled_tokens",
                "last_prompt_tokens", "reusable_max", "cached_of_reusable", "cached_of_fixed_reusable",
                "at_reusable_max", "distinct_tools_blocks", "ttft_p50_s", "vllm_queries", "vllm_hits"]


def markdown(profile: str, command: str, summaries: list[dict[str, Any]], ratio_rows: list[dict[str, Any]],
             picks: list[dict[str, Any]], problems: list[str]) -> str:
    lines = [f"# Prefix cache, profile `{profile}`", "", f"Command: `{command}`", "",
             ("Every arm replays the same scripted trajectory through the Harness; each request is measured with "
             "`max_tokens: 1`. `reusable_max` is floor((shared prefix - 1)/block)*block against the arm's own "
             "earlier requests; `cached_of_fixed_reusable` divides by the fixed arm's reusable maximum (the same "
             "conversation with stable bytes). `ttft_p50_s` is the median latency of the one-token request; on the "
              "shared 2-core machine it moves with other processes' load, the token counts do not."), ""]
    lines += _table(summaries, SUMMARY_COLS)
    if ratio_rows:
        cols = ["workflow"] + [k for k in ratio_rows[0] if k != "workflow"]
        lines += ["", "## Ratios", ""] + _table(ratio_rows, cols)
    if picks:
        lines += ["", "## First picks (real sampling, temperature 1)", "",
                  ("On the same requests as above, how the first tool call of a sampled answer fared: `pick` (an "
                   "Allowed pick with valid arguments), `working` (a Working tool with valid arguments), `no_call`, "
                   "`not_allowed` (a name off the Allowed picks), `bad_args` (arguments outside the schema). "
                   "`valid_share` is (pick + working) / requests; `pick_valid_share` is the share of calls to an "
                   "Allowed pick whose arguments were valid. Masked decoding uses the tiny model's caps "
                   "(strings <= 48 characters)."), ""]
        lines += _table(picks, ["workflow", "decoding", "requests", *VERDICTS, "valid_share", "pick_valid_share"])
    if problems:
        lines += ["", "## Problems", "", *[f"- {p}" for p in problems]]
    return "\n".join(lines) + "\n"


def write_report(out: Path, stem: str, report: dict[str, Any], md: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=2))
    (out / f"{stem}.md").write_text(md)


ARM_COLORS = {"fixed": "#2a9d8f", "narrowed": "#e9c46a", "reordered": "#e76f51", "fixed+masking": "#264653"}


def plot(path: Path, title: str, per_arm: dict[str, list[dict[str, Any]]]) -> bool:
    """Cached (solid) and prefilled (dashed) tokens per request, one colour per arm. False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for arm, reqs in per_arm.items():
        xs = [r["i"] for r in reqs]
        color = ARM_COLORS.get(arm, "#888888")
        width = 4.0 if arm == "fixed" else 1.5  # fixed+masking lies on fixed: draw fixed wide, beneath
        ax.plot(xs, [r["cached"] for r in reqs], color=color, linestyle="-", marker=".", linewidth=width,
                label=f"{arm} cached")
        ax.plot(xs, [r["prompt"] - r["cached"] for r in reqs], color=color, linestyle="--", linewidth=width,
                label=f"{arm} prefilled")
    ax.set_xlabel("request")
    ax.set_ylabel("tokens")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
