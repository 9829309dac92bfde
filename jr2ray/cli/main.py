"""`jr2ray`'s command line: the argparse tree, the settings read once per command, and exit codes.

Exit codes: 0 ok, 1 error (including a run that ended in error), 2 usage.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, NoReturn

from jr2ray.cli import commands, errors
from jr2ray.cli.errors import EXIT_ERROR, EXIT_USAGE, CliError
from jr2ray.cli.format import say
from jr2ray.cli.instance import DEFAULT_PORT, cmd_down, cmd_up
from jr2ray.cli.logs import cmd_logs
from jr2ray.cli.stores import cmd_store_copy
from jr2ray.cli.supervise import cmd_supervise
from jr2ray.settings import Settings, file_values, load_settings, sources


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors exit 2, with the usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _kv_blocks(text: str) -> int:
    """`up --kv-blocks`: 0 (the profile's own cache) or at least 2 blocks (vLLM keeps one back)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of blocks: {text!r}") from None
    if n != 0 and n < 2:
        raise argparse.ArgumentTypeError(f"{n} blocks: give 0 (the profile's own cache) or at least 2")
    return n


def _add_up(sub: Any) -> None:
    up = sub.add_parser("up", help="start or join Ray, deploy the API; print seats and warnings. Flags not given "
                                   "come from the last `up` (kept in <home>/config.json), else the defaults")
    up.add_argument("--address", help="join this Ray cluster instead of starting one")
    up.add_argument("--host", default=None, help="address the API listens on (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=None,
                    help=f"HTTP port of the API (Serve's proxy; default {DEFAULT_PORT})")
    up.add_argument("--ray-port", type=int,
                    help="GCS port of a Ray head started here (default 6379 or free; not in 10002-19999, Ray's worker "
                         "ports)")
    up.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=None,
                    help="a Ray head other machines can join: its ports listen on the routable address, not only "
                         "on 127.0.0.1 (kept: --no-cluster turns it off again)")
    up.add_argument("--num-cpus", type=int, default=None, help="logical CPUs of a Ray head started here (default 4)")
    up.add_argument("--metrics-port", type=int, default=None,
                    help="Ray's metrics export port (Prometheus) on a head started here; default JR2RAY_METRICS_PORT, "
                         "else 9393; 0: a free port. Printed by `up`, recorded in instance.json, shown by `status`")
    up.add_argument("--gcs-redis", default=None, metavar="HOST:PORT",
                    help="Ray's GCS fault tolerance for a head started here: its GCS keeps its state in this Redis "
                         "(RAY_REDIS_ADDRESS; a password from RAY_REDIS_PASSWORD), so a GCS that dies can be "
                         "started again (`jr2ray supervise` does) while the raylet and every actor go on. Kept; '' "
                         "turns it off")
    up.add_argument("--temp-dir", help="Ray temp dir of a head started here (default /tmp/jr2ray-<home hash>)")
    up.add_argument("--store", help="the runs' journal store: a directory (SQLite files, the default "
                                    "<home>/runs) or a postgresql:// URL; same as JR2RAY_STORE")
    up.add_argument("--llm", choices=("cpu", "gpu", "none"), default=None,
                    help="also deploy the vLLM app (default none)")
    up.add_argument("--launcher", default=None,
                    help="TurnLauncher for new runs: auto (the Harness if installed), none, or module:attr; "
                         "default JR2RAY_LAUNCHER, else the kept one, else auto. Recorded in instance.json, "
                         "where jr2ray.connect() reads it, and kept in config.json for the next up")
    up.add_argument("--turn-admission", choices=("on", "off"), default=None,
                    help="Turn admission: each model request of a run waits until its conversation fits in the LLM "
                         "app's KV budget (read from vLLM) beside the other live ones; default JR2RAY_TURN_ADMISSION, "
                         "else the kept one, else off. Kept in config.json; `jr2ray status` shows the budget")
    up.add_argument("--kv-blocks", type=_kv_blocks, default=None, metavar="N",
                    help="give each vLLM engine of --llm a KV cache of N blocks (vLLM's num_gpu_blocks_override; "
                         "max_model_len is lowered to fit), e.g. to see Turn admission hold requests back; 0: the "
                         "profile's own cache (the default). Kept in config.json")
    up.add_argument("--workflows", action="append", metavar="PKG.MODULE",
                    help="also serve the workflow(s) in this module (a module exporting `machine`, or a package of "
                         "such modules); repeatable; beside workflows/ and the `jr2ray.workflows` entry points")
    up.set_defaults(func=cmd_up)
    sup = sub.add_parser("supervise", help="keep this home's instance up: start it, and when its raylet or GCS "
                                           "dies, stop what is left of it (by pid) and start it again")
    sup.add_argument("--interval", type=float, default=1.0, help="seconds between checks of the head (default 1)")
    sup.add_argument("--up-timeout", type=float, default=600.0, help="seconds one `jr2ray up` may take")
    sup.add_argument("--once", action="store_true", help="check (and restart if needed) once, then exit")
    sup.set_defaults(func=cmd_supervise)
    down = sub.add_parser("down", help="stop the Ray this home started (or remove the API from a joined one)")
    down.set_defaults(func=cmd_down)


def _add_runs(sub: Any) -> None:
    run = sub.add_parser("run", help="start a run and stream its activity; print the final status as JSON")
    run.add_argument("workflow")
    run.add_argument("--input", required=True, help="the run's input as JSON (or @file.json)")
    run.add_argument("--detach", action="store_true", help="print the new run's status and return at once")
    run.set_defaults(func=commands.cmd_run)

    send = sub.add_parser("send", help="send an event through an open Gate")
    send.add_argument("run", help="run id or an unambiguous prefix (4+ characters)")
    send.add_argument("--gate", required=True)
    send.add_argument("--event", required=True)
    send.add_argument("--input", default="{}", help="the event's payload as JSON (or @file.json)")
    send.set_defaults(func=commands.cmd_send)

    status = sub.add_parser("status", help="a run's status, or the instance's")
    status.add_argument("run", nargs="?")
    status.set_defaults(func=commands.cmd_status)

    runs = sub.add_parser("runs", help="list runs, newest first, and whether each is live, parked or queued")
    runs.add_argument("--json", action="store_true")
    runs.add_argument("--limit", type=int, default=None, help="at most this many (default: every run, paged)")
    runs.add_argument("--status", default=None, help="only runs with this status (active, queued, done, ...)")
    runs.add_argument("--where", choices=("live", "parked", "queued"), default=None,
                      help="only runs that are live, parked or queued")
    runs.add_argument("--workflow", default=None, help="only runs of this workflow")
    runs.add_argument("--prefix", default=None, help="only runs whose id starts so")
    runs.add_argument("--summary", action="store_true", help="count runs by status, where and state instead")
    runs.add_argument("--watch", action="store_true", help="show it again every --interval seconds until Ctrl-C")
    runs.add_argument("--interval", type=float, default=2.0, help="seconds between --watch refreshes (default 2)")
    runs.add_argument("--count", type=int, default=None, help=argparse.SUPPRESS)  # --watch: stop after N (tests)
    runs.set_defaults(func=commands.cmd_runs)

    cancel = sub.add_parser("cancel", help="cancel an active run (exit 1 if it had already ended)")
    cancel.add_argument("run")
    cancel.set_defaults(func=commands.cmd_cancel)

    logs = sub.add_parser("logs", help="the instance's structured event logs ($JR2RAY_HOME/logs), of one run or all")
    logs.add_argument("run", nargs="?", help="only this run's lines: its id or an unambiguous prefix (4+ characters)")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
    logs.add_argument("--json", action="store_true", help="print each line as the JSON it was written as")
    logs.add_argument("--rounds", type=int, default=None, help=argparse.SUPPRESS)  # --follow: stop after N (tests)
    logs.set_defaults(func=cmd_logs)

    gc = sub.add_parser("gc", help="purge the journals of runs finished longer ago than the retention setting")
    gc.add_argument("--days", type=float, default=None, help="retention in days (default: JR2RAY_RETENTION_DAYS, 7)")
    gc.add_argument("--json", action="store_true")
    gc.set_defaults(func=commands.cmd_gc)
    _add_versions(sub)


def _add_versions(sub: Any) -> None:
    from jr2ray.cli import versions_cmd
    from jr2ray.cli.migrate_cmd import cmd_migrate

    wf = sub.add_parser("workflows", help="each workflow's versions, which is current, and their runs by status")
    wf.add_argument("--json", action="store_true")
    wf.set_defaults(func=versions_cmd.cmd_workflows)

    reload = sub.add_parser("reload", help="take each workflow's file as the version for new runs, and say which")
    reload.set_defaults(func=versions_cmd.cmd_reload)

    mig = sub.add_parser("migrate", help="move waiting runs of a workflow to its current version, on purpose")
    mig.add_argument("workflow")
    mig.add_argument("--from", dest="from_version", default=None, help="only runs on this version (a prefix)")
    mig.add_argument("--to", default="current", choices=("current",), help="the version to move them to")
    mig.add_argument("--map", action="append", default=[], metavar="OLD.PATH=NEW.PATH",
                     help="a state of the old version that is called otherwise in the new one (repeatable)")
    mig.add_argument("--dry-run", action="store_true", help="say what would move, and change nothing")
    mig.add_argument("--json", action="store_true")
    mig.set_defaults(func=cmd_migrate)


def _add_tools(sub: Any) -> None:
    demo = sub.add_parser("demo", help="the notes workflow end to end on the Ray-hosted tiny model")
    demo.add_argument("--timeout", type=float, default=600.0)
    demo.set_defaults(func=commands.cmd_demo)

    bench = sub.add_parser("bench", help="the prefix-cache benchmark suite (`jr2ray bench --help` for its options)",
                           add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the suite")
    bench.set_defaults(func=commands.cmd_bench)

    store = sub.add_parser("store", help="the runs' journal store")
    ssub = store.add_subparsers(dest="store_command", required=True, parser_class=_Parser)
    copy = ssub.add_parser("copy", help="copy every run (journals, run index, timers, transcripts) to another "
                                        "store and verify it (counts, a hash per journal); the instance must be down")
    copy.add_argument("--to", required=True, help="the store to copy to: a directory or a postgresql:// URL")
    copy.add_argument("--from", dest="source", default=None,
                      help="the store to copy from (default: the instance's, as `jr2ray settings` shows it)")
    copy.add_argument("--json", action="store_true", help="also print each copied journal's hash")
    copy.set_defaults(func=cmd_store_copy)

    settings = sub.add_parser("settings", help="print every setting's effective value and where it came from")
    settings.add_argument("--json", action="store_true")
    settings.set_defaults(func=commands.cmd_settings)

    model = sub.add_parser("model", help="local model tools")
    msub = model.add_subparsers(dest="model_command", required=True, parser_class=_Parser)
    tiny = msub.add_parser("build-tiny", help="build the tiny random-weight model for CPU vLLM")
    tiny.add_argument("--out", help="output dir (default $JR2RAY_HOME/models/tiny)")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=commands.cmd_model)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jr2ray", description="Statechart-driven LLM agent workflows on Ray.")
    p.add_argument("--home", help="instance directory (default $JR2RAY_HOME or ~/.jr2ray)")
    p.add_argument("--api", help="API base URL (default $JR2RAY_API, else the one `up` recorded)")
    p.add_argument("--env-file", help="read settings from this KEY=value file too (default $JR2RAY_ENV_FILE)")
    common = _Parser(add_help=False)  # the same options after the command, too
    for flag in GLOBAL_VALUED:
        common.add_argument(flag, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add = sub.add_parser

    def sub_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        return add(name, parents=[common], **kw)

    sub.add_parser = sub_parser  # type: ignore[method-assign,assignment]
    _add_up(sub)
    _add_runs(sub)
    _add_tools(sub)
    return p


PASSTHROUGH = frozenset({"bench"})  # commands whose whole tail belongs to another program's parser
GLOBAL_VALUED = ("--home", "--api", "--env-file")


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`jr2ray bench --quick`: argparse's REMAINDER does not take a tail that starts with an option, so the tail of
    a pass-through command is cut off before parsing. Returns (what jr2ray parses, the tail or None)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in GLOBAL_VALUED:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return (argv[:i + 1], argv[i + 1:]) if a in PASSTHROUGH else (argv, None)
    return argv, None


def load(args: argparse.Namespace) -> Settings:
    """The settings, read once for this command; an env file's values are exported so child processes see them."""
    flags = {"home": args.home, "api": args.api, "store": getattr(args, "store", None)}
    if getattr(args, "func", None) is commands.cmd_settings:
        import jr2ray.harness.providers  # noqa: F401  (each provider declares its settings section on import)
    try:
        settings = load_settings(args.env_file, **flags)
    except (OSError, ValueError) as exc:
        raise errors.bad_settings(exc) from None
    args.setting_sources = sources(args.env_file, flags)  # before the file's values are exported below
    for key, value in file_values(args.env_file).items():
        if value is not None:
            os.environ.setdefault(key, value)
    return settings


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE"):  # `jr2ray runs | head` ends quietly, like any Unix tool
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    head, tail = split_passthrough(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(head)
    if tail is not None:
        args.rest = tail
    try:
        args.settings = load(args)
        return int(args.func(args))
    except CliError as exc:
        say(f"jr2ray: {exc}")
        return exc.code
    except KeyboardInterrupt:
        return EXIT_ERROR
