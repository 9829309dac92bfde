"""Draw the shipped dashboard (`cluster/grafana-jr2ray.json`) from a live Prometheus, without Grafana.

Each panel's expressions are run over a time range through `/api/v1/query_range`, and the panels are drawn with
matplotlib where the dashboard places them (its `gridPos`, rows as section titles): a timeseries panel as lines named
by its `legendFormat`, a stat panel as its latest values. What this draws is what Prometheus answered, so a panel
whose series are missing reads "no data". The observe test renders it after its runs (its `observed` instance);
`docs/dashboard.png` is one such rendering. By hand, against any Prometheus that scrapes an instance:

    python3 tests/observe/dashboard_render.py --prometheus http://127.0.0.1:9090 --minutes 15 --out dashboard.png
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

DASHBOARD = Path(__file__).resolve().parents[2] / "cluster" / "grafana-jr2ray.json"
VLLM_SERIES = "ray_vllm_"


@dataclass
class Series:
    name: str
    times: list[float]
    values: list[float]


@dataclass
class Panel:
    title: str
    kind: str  # timeseries or stat
    unit: str
    grid: dict[str, int]
    exprs: list[tuple[str, str]]  # (expr, legendFormat)
    series: list[Series] = field(default_factory=list)
    answered: int = 0  # series Prometheus gave, drawable or not (a quantile of a flat histogram is all NaN)


def layout(dashboard: Path = DASHBOARD, skip: str | None = VLLM_SERIES) -> tuple[list[Panel], list[tuple[str, int]]]:
    """The dashboard's panels and row titles (with their grid y), leaving out panels whose every expression contains
    `skip` (the vLLM panels need the LLM app) and rows left empty by that."""
    panels: list[Panel] = []
    rows: list[tuple[str, int]] = []
    current: tuple[str, int] | None = None
    kept_in_row = 0

    def close_row() -> None:
        if current is not None and kept_in_row:
            rows.append(current)

    for p in json.loads(dashboard.read_text())["panels"]:
        if p.get("type") == "row":
            close_row()
            current, kept_in_row = (str(p.get("title", "")), int(p["gridPos"]["y"])), 0
            continue
        exprs = [(str(t["expr"]), str(t.get("legendFormat") or "")) for t in p.get("targets", []) if t.get("expr")]
        if skip and exprs and all(skip in e for e, _ in exprs):
            continue
        unit = str(p.get("fieldConfig", {}).get("defaults", {}).get("unit") or "short")
        panels.append(Panel(str(p.get("title", "")), str(p.get("type", "timeseries")), unit, dict(p["gridPos"]),
                            exprs))
        kept_in_row += 1
    close_row()
    return panels, rows


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's `{{label}}` substitution; no format: the label set."""
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or "value"


def fill(panels: list[Panel], prometheus: str, start: float, end: float, step: float) -> None:
    """Run every panel's expressions over [start, end] and keep the answered series (NaN points dropped)."""
    with httpx.Client(base_url=prometheus, timeout=60) as http:
        for panel in panels:
            panel.series, panel.answered = [], 0
            for expr, fmt in panel.exprs:
                r = http.get("/api/v1/query_range", params={"query": expr, "start": str(start), "end": str(end),
                                                             "step": str(step)})
                body = r.json()
                if body.get("status") != "success":
                    raise RuntimeError(f"{panel.title}: {expr}: {body}")
                panel.answered += len(body["data"]["result"])
                for res in body["data"]["result"]:
                    pts = [(float(t), float(v)) for t, v in res["values"] if not math.isnan(float(v))]
                    if pts:
                        panel.series.append(Series(legend(fmt, res["metric"]), [t for t, _ in pts],
                                                   [v for _, v in pts]))


def _scale(unit: str) -> tuple[float, str]:
    """(factor, axis label) of a Grafana unit."""
    return {"s": (1000.0, "ms"), "percentunit": (100.0, "%"), "ops": (1.0, "per second")}.get(unit, (1.0, ""))


def draw(panels: list[Panel], rows: list[tuple[str, int]], out: Path, title: str) -> None:
    """The panels on one image, placed by their grid (24 columns; one grid unit of height is about 0.3 inch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    # The grid's y, compacted: the skipped panels' rows leave no gap.
    ys = sorted({p.grid["y"] for p in panels} | {y for _, y in rows})
    place: dict[int, float] = {}
    at = 0.0
    for y in ys:
        place[y] = at
        heights = [p.grid["h"] for p in panels if p.grid["y"] == y] or [1]
        at += max(heights) + (0.6 if y in {ry for _, ry in rows} else 0.0)
    total = at + 2.0
    unit_in = 0.32
    fig = plt.figure(figsize=(18, total * unit_in), dpi=90, facecolor="#111217")
    fig.text(0.01, 1 - 0.5 / total, title, color="white", fontsize=15, va="center", weight="bold")
    top = 1.6
    for name, y in rows:
        fig.text(0.01, 1 - (top + place[y] + 0.5) / total, name, color="#ccccdc", fontsize=13, va="center",
                 weight="bold")
    for p in panels:
        g = p.grid
        x0, w = g["x"] / 24, g["w"] / 24
        y0 = top + place[g["y"]] + (0.6 if g["y"] in {ry for _, ry in rows} else 0.0)
        ax = fig.add_axes((x0 + 0.035, 1 - (y0 + g["h"] - 0.9) / total, w - 0.05, (g["h"] - 2.0) / total))
        ax.set_facecolor("#181b1f")
        for side in ax.spines.values():
            side.set_color("#444")
        ax.tick_params(colors="#aaa", labelsize=8)
        ax.set_title(p.title, color="white", fontsize=10, loc="left")
        factor, label = _scale(p.unit)
        if not p.series:
            empty = "no points (all NaN)" if p.answered else "no data"
            ax.text(0.5, 0.5, empty, color="#888", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        if p.kind == "stat":
            ax.set_xticks([])
            ax.set_yticks([])
            text = "   ".join(f"{s.name}: {s.values[-1] * factor:g}" for s in p.series)
            ax.text(0.5, 0.5, text, color="#73bf69", fontsize=20, ha="center", va="center", transform=ax.transAxes)
            continue
        for s in p.series:
            when = [datetime.fromtimestamp(t, tz=UTC) for t in s.times]
            ax.plot(when, [v * factor for v in s.values], linewidth=1.4, label=s.name,
                    marker="o" if len(s.times) < 3 else None, markersize=3)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
        ax.set_ylabel(label, color="#aaa", fontsize=8)
        ax.grid(color="#2a2d33", linewidth=0.6)
        ax.legend(fontsize=7, loc="upper left", facecolor="#181b1f", edgecolor="#444", labelcolor="#ddd",
                  ncol=2 if len(p.series) > 4 else 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=fig.get_facecolor())
    plt.close(fig)


def render(prometheus: str, out: Path, minutes: float = 15.0, step: float | None = None,
           skip: str | None = VLLM_SERIES) -> dict[str, int]:
    """Draw the dashboard over the last `minutes` from `prometheus` into `out`; returns how many series Prometheus
    gave each panel (a histogram's quantile over a range where it never moved is a series of NaN: given, not drawn)."""
    panels, rows = layout(skip=skip)
    end = time.time()
    start = end - minutes * 60
    step = step or max(2.0, minutes * 60 / 240)
    fill(panels, prometheus, start, end, step)
    when = datetime.fromtimestamp(end, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    draw(panels, rows, out, f"jr2ray: from Prometheus {prometheus}, the {minutes:g} minutes to {when}")
    return {p.title: p.answered for p in panels}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", required=True, help="Prometheus base URL")
    ap.add_argument("--out", default="dashboard.png")
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--with-vllm", action="store_true", help="also the vLLM panels (need `up --llm`)")
    args = ap.parse_args()
    counts = render(args.prometheus, Path(args.out), args.minutes, skip=None if args.with_vllm else VLLM_SERIES)
    print(json.dumps(counts, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
