"""The commands that drive runs through the API (run, send, status, runs, cancel), the local tools (demo, bench,
model) and `settings`. `up`/`down` are in `instance.py`."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from jr2ray.cli import errors
from jr2ray.cli.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from jr2ray.cli.format import activity, out, say, setting_description, settings_table
from jr2ray.cli.http import Api
from jr2ray.cli.instance import driver_env, metrics_url, read_instance
from jr2ray.cli.runlist import runs_table, summary, summary_table, watch
from jr2ray.settings import describe, printable_store


def parse_json_arg(text: str, what: str) -> Any:
    """`--input` takes JSON, or @path to a JSON file. A bad value is a usage error (exit 2)."""
    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
        return json.loads(raw)
    except (OSError, ValueError) as exc:
        raise errors.not_json(what, exc) from None


def _api(args: argparse.Namespace) -> Api:
    return Api(args.settings.home_dir(), args.api, args.settings)


def follow(api: Api, run_id: str) -> dict[str, Any]:
    """Print the run's activity until it ends; return its final status."""
    for kind, data in api.events(run_id):
        line = activity(kind, data) if isinstance(data, dict) else None
        if line:
            say(line)
        if kind == "end" or (kind == "status" and isinstance(data, dict) and data.get("status") != "active"):
            break
    return api.request("GET", f"/runs/{run_id}")


def cmd_run(args: argparse.Namespace) -> int:
    api = _api(args)
    data = parse_json_arg(args.input, "--input")
    view = api.request("POST", f"/workflows/{args.workflow}/runs", {"input": data})
    rid = view["id"]
    say(f"started run {rid} of {args.workflow}")
    if args.detach:
        out(view)
        return EXIT_OK
    final = follow(api, rid)
    out(final)
    return EXIT_OK if final.get("status") == "done" else EXIT_ERROR


def cmd_send(args: argparse.Namespace) -> int:
    api = _api(args)
    data = parse_json_arg(args.input, "--input")
    if not isinstance(data, dict):
        raise errors.not_an_object("--input")
    rid = api.resolve(args.run)
    out(api.request("POST", f"/runs/{rid}/gates/{args.gate}/events", {"event": args.event, "input": data}))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    api = _api(args)
    if args.run:
        out(api.request("GET", f"/runs/{api.resolve(args.run)}"))
        return EXIT_OK
    health = api.request("GET", "/healthz")
    counts: dict[str, int] = {}
    where: dict[str, int] = {}  # active and queued runs by where they are: live, parked, queued
    for r in api.runs():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        if r.get("presence"):
            where[r["presence"]] = where.get(r["presence"], 0) + 1
    inst = read_instance(args.settings.home_dir())
    out({"api": api.url, "healthy": health.get("ok"), "version": health.get("version"),
         "ray_address": inst.ray_address if inst else None, "ray_env": driver_env(inst),
         "metrics": metrics_url(inst) if inst else None,
         "store": printable_store(args.settings.store_location(create=False)), "runs": counts, "where": where,
         "turn_admission": api.optional("/admission")})
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    """The run list (or `--summary`'s counts), once or, with `--watch`, again every `--interval` seconds."""
    api = _api(args)
    if args.interval <= 0:
        raise errors.bad_interval(args.interval)

    def render() -> str:
        runs = list(api.runs(limit=args.limit, status=args.status, where=args.where, workflow=args.workflow,
                             prefix=args.prefix))
        shown: Any = summary(runs) if args.summary else runs
        if args.json:
            return json.dumps(shown, indent=2, default=str)
        return summary_table(shown) if args.summary else runs_table(shown)

    if args.watch:
        watch(render, args.interval, args.count)
    else:
        print(render(), flush=True)
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel an active run. One that had already ended is an error (exit 1) saying how it ended, as `kill` of a
    finished process is: a script learns that this command did not cancel it. A `queued` run (waiting for a slot)
    has not ended: it is cancelled without ever going live."""
    api = _api(args)
    run_id = api.resolve(args.run)
    before = api.request("GET", f"/runs/{run_id}")
    if before.get("status") not in ("active", "queued", "drifted"):
        raise errors.already_ended(run_id, before.get("status"))
    after = api.request("POST", f"/runs/{run_id}/cancel")
    if after.get("status") != "cancelled":  # it ended on its own in the meantime
        raise errors.already_ended(run_id, after.get("status"))
    out(after)
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    """Retention: works on the store itself (the journal directory or the database), so it needs no instance up."""
    from jr2ray.cli.versions_cmd import gc_versions
    from jr2ray.run.store import open_store

    days = args.days if args.days is not None else args.settings.retention_days
    store = open_store(args.settings.store_location(), args.settings)
    removed = store.purge_finished(days * 24 * 3600)
    dropped = gc_versions(store, days * 24 * 3600, args.settings.catalog_modules())  # after the runs that used them
    if args.json:
        out({"purged": removed, "retention_days": days, "versions_dropped": dropped})
    else:
        print(f"purged {len(removed)} finished run(s) older than {days:g} days" +
              "".join(f"\n  {rid}" for rid in removed))
        if dropped:
            print(f"dropped {len(dropped)} Workflow version(s) no run uses" + "".join(f"\n  {v}" for v in dropped))
    return EXIT_OK


def cmd_settings(args: argparse.Namespace) -> int:
    """Every setting's effective value and where it came from (flag, environment, file, default); secrets masked."""
    rows = [r | {"description": setting_description(r["name"])} for r in describe(args.settings, args.setting_sources)]
    if args.json:
        out(rows)
    else:
        print(settings_table(rows))
    return EXIT_OK


def _export_home(args: argparse.Namespace) -> None:
    """In-process tools and the Ray processes they start resolve the home from the environment."""
    if getattr(args, "home", None):
        os.environ["JR2RAY_HOME"] = str(args.settings.home_dir())


def cmd_demo(args: argparse.Namespace) -> int:
    """The notes workflow end to end on the Ray-hosted tiny model, self-contained: no `up` needed.

    Builds the tiny model if missing, starts a private Ray and the LLM app, runs notes with the writer on the model
    and this process as the editor, prints the pick history, the notes and the cache table, then stops it all.
    """
    from jr2ray.demo import run_demo

    _export_home(args)
    return run_demo(args.settings, timeout_s=args.timeout)


def cmd_bench(args: argparse.Namespace) -> int:
    """The prefix-cache suite (jr2ray/bench); the rest of the line is its argv."""
    from jr2ray.bench import main as bench_main

    _export_home(args)
    rest = list(args.rest)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    try:
        return int(bench_main(rest, args.settings) or 0)
    except SystemExit as exc:  # the suite's own argparse: keep its usage exit code
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def cmd_model(args: argparse.Namespace) -> int:
    from jr2ray.tinymodel import build_tiny, default_model_dir, file_hashes

    _export_home(args)
    out_dir = build_tiny(Path(args.out) if args.out else default_model_dir(args.settings), seed=args.seed,
                         progress=say)
    for name, digest in file_hashes(out_dir).items():
        print(f"{digest}  {name}")
    print(out_dir)
    return EXIT_OK
