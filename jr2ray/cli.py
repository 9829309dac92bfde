"""The `jr2ray` command (SPEC §7): bring an instance up, then drive runs through its HTTP API.

Why through HTTP: the API is the one place that checks tokens and input, so the CLI gets exactly the behaviour a
webhook or the Console gets, and a command costs one request instead of joining Ray (seconds) each time.
Only `up`/`down` (and `model`, `bench`) touch Ray or the machine directly.

Exit codes: 0 ok, 1 error (including a run that ended in error), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel

from jr2ray.settings import Settings, describe, load_settings
from jr2ray.settings import run_env as settings_run_env

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
INSTANCE_FILE = "instance.json"
DEFAULT_PORT = 8000
MIN_PREFIX = 4


class CliError(Exception):
    """A failure to report on stderr with exit code 1 (or `code`)."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class Instance(BaseModel):
    """What `up` leaves in $JR2RAY_HOME/instance.json so later commands (and `down`) find the instance."""

    api: str
    ray_address: str
    started_ray: bool
    temp_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    ray_auth_mode: str | None = None  # RAY_AUTH_MODE every process of ours joins with; None: leave the env's
    ray_auth_token_path: str | None = None  # the Ray auth token of a Ray this home started (0600, in the home)


# ---- small helpers -------------------------------------------------------------------------------------------------
def home_dir(arg: str | None, settings: Settings | None = None) -> Path:
    """The instance directory: `--home`, else the settings' (JR2RAY_HOME or ~/.jr2ray)."""
    return (settings or load_settings()).model_copy(update={"home": arg} if arg else {}).home_dir()


def read_instance(home: Path) -> Instance | None:
    path = home / INSTANCE_FILE
    if not path.exists():
        return None
    try:
        return Instance.model_validate_json(path.read_text())
    except ValueError:
        return None


def write_instance(home: Path, inst: Instance) -> None:
    (home / INSTANCE_FILE).write_text(inst.model_dump_json(indent=2) + "\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def parse_json_arg(text: str, what: str) -> Any:
    """`--input` takes JSON, or @path to a JSON file. A bad value is a usage error (exit 2)."""
    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
        return json.loads(raw)
    except (OSError, ValueError) as exc:
        raise CliError(f"{what} is not valid JSON: {exc}", EXIT_USAGE) from None


def say(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def out(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str), flush=True)


# ---- the API client ----------------------------------------------------------------------------------------------
class Api:
    """A thin httpx wrapper: base URL and token from flags, env or the home dir; API errors become CliError."""

    def __init__(self, home: Path, url: str | None, settings: Settings | None = None) -> None:
        import httpx

        settings = (settings or load_settings()).model_copy(update={"home": str(home)})
        inst = read_instance(home)
        base = url or settings.api or (inst.api if inst and inst.api else None)
        if not base:  # no guessing (say :8000): the token must only ever go to the instance it belongs to
            raise CliError(f"no jr2ray instance recorded in {home / INSTANCE_FILE}: run `jr2ray up`, or pass --api "
                           f"(or JR2RAY_API) to reach one elsewhere")
        self.url = base.rstrip("/")
        token = settings.instance_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(60.0, connect=5.0))

    def request(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        import httpx

        try:
            r = self.http.request(method, path, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            raise CliError(f"no jr2ray API at {self.url}: is `jr2ray up` running?") from None
        except httpx.HTTPError as exc:
            raise CliError(f"{method} {path}: {exc}") from None
        try:
            data = r.json()
        except ValueError:
            data = r.text
        if r.status_code not in ok:
            detail = data.get("detail") if isinstance(data, dict) else data
            msg = f"{r.status_code}: {detail}"
            if isinstance(data, dict) and "accepts_now" in data:
                msg += f" (accepts now: {', '.join(data['accepts_now']) or 'nothing'})"
            raise CliError(msg)
        return data

    def events(self, run_id: str, retries: int = 5) -> Iterator[tuple[str, Any]]:
        """The run's SSE feed as (event, data) pairs (a keep-alive comment is ("keep-alive", None)).

        A stream that breaks off (a proxy restart, a dropped connection) is resumed after the last event id it
        delivered, so nothing is shown twice or lost; `retries` broken streams in a row without progress give up.
        """
        import httpx

        since, failures = 0, 0
        while True:
            kind, data, progressed = "message", "", False
            try:
                with self.http.stream("GET", f"/runs/{run_id}/events", params={"since": since},
                                      timeout=httpx.Timeout(None, connect=5.0)) as r:
                    if r.status_code != 200:
                        r.read()
                        try:
                            detail = r.json().get("detail", r.text)
                        except ValueError:
                            detail = r.text
                        raise CliError(f"{r.status_code}: {detail}")
                    for line in r.iter_lines():
                        if line == "":
                            if data:
                                progressed = True
                                yield kind, json.loads(data)
                                if kind == "end":
                                    return
                            kind, data = "message", ""
                        elif line.startswith(":"):
                            yield "keep-alive", None
                        elif line.startswith("event:"):
                            kind = line[6:].strip()
                        elif line.startswith("data:"):
                            data += line[5:].strip()
                        elif line.startswith("id:") and line[3:].strip().isdigit():
                            since = int(line[3:].strip())
                error: str = "the stream closed before the run ended"
            except (httpx.ConnectError, httpx.ConnectTimeout):
                if since == 0 and not progressed:
                    raise CliError(f"no jr2ray API at {self.url}: is `jr2ray up` running?") from None
                error = "the API went away"
            except httpx.HTTPError as exc:
                error = repr(exc)
            failures = 0 if progressed else failures + 1
            if failures >= retries:
                raise CliError(f"the event stream of run {run_id} keeps breaking off ({error})")
            say(f"(the event stream broke off: {error}; resuming after event {since})")
            time.sleep(1.0)

    def resolve(self, prefix: str) -> str:
        """A full run id from an id or an unambiguous prefix of at least 4 characters."""
        ids = [r["id"] for r in self.request("GET", "/runs?limit=1000")]
        if prefix in ids:
            return prefix
        if len(prefix) < MIN_PREFIX:
            raise CliError(f"run id prefix {prefix!r} is shorter than {MIN_PREFIX} characters", EXIT_USAGE)
        hits = [i for i in ids if i.startswith(prefix)]
        if not hits:
            raise CliError(f"no run matches {prefix!r}")
        if len(hits) > 1:
            raise CliError(f"run id prefix {prefix!r} is ambiguous: {', '.join(sorted(hits))}")
        return hits[0]


# ---- up / down -----------------------------------------------------------------------------------------------
RAY_TOKEN_FILE = "ray_auth_token"


def _ray_env(home: Path, inst: Instance | None = None) -> dict[str, str]:
    """The environment for `ray start` and for joining: the instance's Ray auth settings override the caller's."""
    env = dict(os.environ)
    env["JR2RAY_HOME"] = str(home)
    # A loaded 2-core box can take longer than Ray's default to start the node agent; do not fail `up` for that.
    env.setdefault("RAY_agent_register_timeout_ms", "120000")
    if inst is not None and inst.ray_auth_mode:
        env["RAY_AUTH_MODE"] = inst.ray_auth_mode
    if inst is not None and inst.ray_auth_token_path:
        env["RAY_AUTH_TOKEN_PATH"] = inst.ray_auth_token_path
        env.pop("RAY_AUTH_TOKEN", None)  # it would win over the path
    return env


def _ray_auth(home: Path, settings: Settings) -> tuple[str | None, str | None]:
    """(RAY_AUTH_MODE, token path) for a Ray head started here.

    Ray 2.60's `ray start` turns token auth on by itself when ~/.ray/auth_token exists, while a later
    `ray.init(address=...)` does not, so the two can disagree (InvalidAuthToken) depending on what other programs
    left in ~/.ray. So a head started here always runs with token auth and a token of its own, kept 0600 in the home,
    and every process of ours joins with exactly that. An explicit RAY_AUTH_MODE other than "token" is respected, and
    a token the caller supplies (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) is used instead of ours.
    """
    mode = settings.ray_auth_mode
    if mode is not None and mode.lower() != "token":
        return mode, None
    if settings.ray_auth_token or settings.ray_auth_token_path:
        return "token", None
    path = home / RAY_TOKEN_FILE
    if not path.exists():
        import secrets

        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    return "token", str(path)


def _join_ray(inst: Instance, home: Path) -> None:
    """Connect this process as a driver. The RAY_* env must be set before Ray reads its config (at import)."""
    for k, v in _ray_env(home, inst).items():
        if k.startswith("RAY_AUTH_"):
            os.environ[k] = v
        elif k.startswith("RAY_"):
            os.environ.setdefault(k, v)
    if inst.ray_auth_token_path:
        os.environ.pop("RAY_AUTH_TOKEN", None)
    import logging

    import ray
    from ray._raylet import Config  # type: ignore[attr-defined]

    Config.initialize("")  # re-read RAY_AUTH_MODE in case Ray was imported before the env was set
    ray.init(address=inst.ray_address, namespace="jr2ray", log_to_driver=False, logging_level=logging.ERROR)


RAY_START_ATTEMPTS = 3


def start_ray(home: Path, args: argparse.Namespace) -> Instance:
    """`ray start --head` with its own temp dir and free ports, so it can sit beside other Ray instances.

    On a loaded machine the raylet can miss Ray's fixed 30 s registration window ("The current node timed out during
    startup"), and a failed `ray start` leaves its GCS and helpers running. So a failed attempt is cleaned up (every
    process naming this home's temp dir) and retried, up to RAY_START_ATTEMPTS times.
    """
    import hashlib

    temp_dir = args.temp_dir or f"/tmp/jr2ray-{hashlib.sha1(str(home).encode()).hexdigest()[:10]}"
    auth_mode, token_path = _ray_auth(home, args.settings)
    inst = Instance(api="", ray_address="", started_ray=True, temp_dir=temp_dir, ray_auth_mode=auth_mode,
                    ray_auth_token_path=token_path)
    failure = ""
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        gcs_port = args.ray_port or (6379 if attempt == 1 and not port_open("127.0.0.1", 6379) else free_port())
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--port", str(gcs_port),
               "--num-cpus", str(args.num_cpus), "--disable-usage-stats", "--include-dashboard", "false",
               "--temp-dir", temp_dir, "--dashboard-port", str(free_port()),
               "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
               "--dashboard-agent-grpc-port", str(free_port()), "--metrics-export-port", str(free_port()),
               "--runtime-env-agent-port", str(free_port())]
        say(f"starting Ray (head, port {gcs_port}, temp dir {temp_dir})" +
            (f", attempt {attempt} of {RAY_START_ATTEMPTS}" if attempt > 1 else ""))
        try:
            proc = subprocess.run(cmd, env=_ray_env(home, inst), capture_output=True, text=True, timeout=300)
            ok, output = proc.returncode == 0, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            ok, output = False, f"`ray start` did not return within {exc.timeout:.0f}s"
        if ok:
            host_ip = _node_ip(output) or "127.0.0.1"
            inst.ray_address = f"{host_ip}:{gcs_port}"
            return inst
        failure = output[-3000:]
        stop_pids(_ray_pids(temp_dir))  # what the failed attempt left behind
        if "Token authentication" in output or "AuthenticationError" in output:
            break  # a configuration problem: retrying cannot help
    raise CliError(f"`ray start` failed:\n{failure}")


def _node_ip(text: str) -> str | None:
    import re

    m = re.search(r"ray start --address='([^':]+):\d+'", text)
    return m.group(1) if m else None


def _wait_http(url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url, timeout=3)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise CliError(f"{url} did not answer within {timeout_s:.0f}s ({last})")


def cmd_up(args: argparse.Namespace) -> int:
    from serve.auth import ensure_token, token_path

    home = args.settings.home_dir()
    token, created = ensure_token(home)
    try:
        inst = _bring_up(home, args)
    except BaseException:
        if created:  # never shown: drop it, so the `up` that succeeds creates and prints one
            token_path(home).unlink(missing_ok=True)
        raise

    print(f"jr2ray is up: API {inst.api}  Console {inst.api}/  docs {inst.api}/docs")
    print(f"Ray: {inst.ray_address}" + (f" (temp dir {inst.temp_dir})" if inst.temp_dir else ""))
    if created:
        print(f"instance token (shown once; stored in {token_path(home)}, mode 0600):")
        print(f"  {token}")
    else:
        print(f"instance token: in {token_path(home)}")
    _print_workflows()
    return EXIT_OK


def _bring_up(home: Path, args: argparse.Namespace) -> Instance:
    """Start or join Ray, deploy the API (and the LLM app); the instance file is written as soon as Ray is up."""
    os.environ["JR2RAY_HOME"] = str(home)
    prev = read_instance(home)
    address = args.address or args.settings.ray_address
    if address:
        inst = Instance(api="", ray_address=address, started_ray=False)
        say(f"joining Ray at {address}")
    elif prev is not None and prev.started_ray and _alive(prev.ray_address):
        inst = prev
        say(f"joining the Ray this home started before, at {prev.ray_address}")
    else:
        inst = start_ray(home, args)
    write_instance(home, inst)  # `down` can clean up even if the rest of `up` fails

    _join_ray(inst, home)
    import ray

    try:
        from serve.api import ApiConfig, deploy_api

        run_env: dict[str, str] | None = None
        llm: Any = None
        if args.llm != "none":
            try:
                from serve import llm
            except ImportError as exc:
                raise CliError(f"--llm {args.llm} needs serve/llm.py and its extras ({exc})") from None
            # Runs started through the API must reach the model where this `up` serves it (`local/...` models).
            entry = llm.llm_application(args.llm)
            run_env = settings_run_env()
            run_env.setdefault("JR2RAY_LOCAL_BASE_URL", llm.base_url_for(args.host, args.port, entry.route_prefix))
        config = ApiConfig(home=str(home), launcher=args.launcher, run_env=run_env)
        url = deploy_api(config, host=args.host, port=args.port)
        inst.api, inst.host, inst.port = url, args.host, args.port
        write_instance(home, inst)
        _wait_http(f"{url}/healthz", 180)
        if llm is not None:
            say(f"deploying the LLM app ({args.llm}); this takes a minute or two")
            base = llm.deploy(args.llm, host=args.host, port=args.port, progress=say)
            say(f"LLM app: {base}")
    finally:
        ray.shutdown()
    return inst


def driver_env(inst: Instance | None) -> dict[str, str]:
    """What a driver script (`jr2ray.connect()`) needs in its environment to join this instance's Ray."""
    if inst is None or not inst.ray_address:
        return {}
    env = {"RAY_ADDRESS": inst.ray_address}
    if inst.ray_auth_mode:
        env["RAY_AUTH_MODE"] = inst.ray_auth_mode
    if inst.ray_auth_token_path:
        env["RAY_AUTH_TOKEN_PATH"] = inst.ray_auth_token_path
    return env


def _alive(address: str) -> bool:
    host, _, port = address.rpartition(":")
    return port.isdigit() and port_open(host or "127.0.0.1", int(port))


def _print_workflows() -> None:
    from jr2ray.run import list_workflows, load_workflow

    for name in list_workflows():
        try:
            m = load_workflow(name)
        except Exception as exc:  # noqa: BLE001 - one broken workflow file must not hide the others
            print(f"\nworkflow {name!r} failed to load: {exc}")
            continue
        print()
        print(m.seats_text())  # type: ignore[attr-defined]
        for w in m.warnings:
            print(f"  warning: {w}")


def _ray_pids(temp_dir: str) -> list[int]:
    """The processes of the Ray this home started: those naming its temp dir (as a whole path, or a path below it),
    and everything below them; never this command or its ancestors."""
    import re

    import psutil

    names_dir = re.compile(r"(^|[=\s'\"])" + re.escape(temp_dir.rstrip("/")) + r"($|[/\s'\",;])")
    me = psutil.Process()
    mine = {me.pid, *(p.pid for p in me.parents())}
    roots: list[psutil.Process] = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.pid not in mine and any(names_dir.search(part) for part in (p.info["cmdline"] or [])):
                roots.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    pids = {p.pid for p in roots}
    for p in roots:
        try:
            pids.update(c.pid for c in p.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    return sorted(pids - mine)


def cmd_down(args: argparse.Namespace) -> int:
    home = args.settings.home_dir()
    inst = read_instance(home)
    if inst is None:
        raise CliError(f"no instance recorded in {home / INSTANCE_FILE}")
    if not inst.started_ray or not inst.temp_dir:
        _join_ray(inst, home)
        import ray
        from ray import serve

        try:
            from serve.api import APP_NAME

            serve.delete(APP_NAME)
        finally:
            ray.shutdown()
        say("removed the API app; the Ray cluster was joined, not started, so it keeps running")
    else:
        stop_pids(_ray_pids(inst.temp_dir))
        say(f"stopped the Ray this home started ({inst.ray_address})")
    (home / INSTANCE_FILE).unlink(missing_ok=True)
    return EXIT_OK


def stop_pids(pids: list[int], grace_s: float = 8.0) -> None:
    """SIGTERM, then SIGKILL whatever is left after the grace period. Only these pids, never by name."""
    import psutil

    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.send_signal(signal.SIGTERM)
            procs.append(p)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=5)


# ---- run commands --------------------------------------------------------------------------------------------
def _describe(kind: str, data: dict[str, Any]) -> str | None:
    """One line of activity for the terminal."""
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
    if kind == "telemetry":
        return (f"model request {data.get('iid')} step {data.get('step')}: prompt {data.get('prompt_tokens')} "
                f"cached {data.get('cached_tokens')}")
    return None


def follow(api: Api, run_id: str, editor_reply: str | None = None, timeout_s: float | None = None
           ) -> dict[str, Any]:
    """Print the run's activity until it ends; return its final status. `editor_reply` plays every Gate (demo)."""
    answered: set[str] = set()
    deadline = time.monotonic() + timeout_s if timeout_s else None
    for kind, data in api.events(run_id):
        if deadline is not None and time.monotonic() > deadline:
            raise CliError(f"run {run_id} did not finish within {timeout_s:.0f}s")
        if data is None:
            continue
        line = _describe(kind, data)
        if line:
            say(line)
        if kind == "status" and editor_reply is not None:
            for g in data.get("gates", []):
                if g["id"] in answered or not g.get("accepts_now"):
                    continue
                event = g["accepts_now"][0]
                spec = next((a for a in g["accepts"] if a["name"] == event), None)
                props = (spec or {}).get("schema", {}).get("properties", {})
                field = next(iter(props), "text")
                say(f"editor → {g['id']}: {event} {{{field!r}: {editor_reply!r}}}")
                api.request("POST", f"/runs/{run_id}/gates/{g['id']}/events",
                            {"event": event, "input": {field: editor_reply}})
                answered.add(g["id"])
        if kind == "status" and data.get("status") != "active":
            break
        if kind == "end":
            break
        if kind == "gate" and data.get("open") is False:
            answered.discard(str(data.get("id")))
    return api.request("GET", f"/runs/{run_id}")


def cmd_run(args: argparse.Namespace) -> int:
    api = Api(args.settings.home_dir(), args.api, args.settings)
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
    api = Api(args.settings.home_dir(), args.api, args.settings)
    data = parse_json_arg(args.input, "--input")
    if not isinstance(data, dict):
        raise CliError("--input must be a JSON object", EXIT_USAGE)
    rid = api.resolve(args.run)
    out(api.request("POST", f"/runs/{rid}/gates/{args.gate}/events", {"event": args.event, "input": data}))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    home = args.settings.home_dir()
    api = Api(home, args.api, args.settings)
    if args.run:
        out(api.request("GET", f"/runs/{api.resolve(args.run)}"))
        return EXIT_OK
    health = api.request("GET", "/healthz")
    runs = api.request("GET", "/runs?limit=1000")
    counts: dict[str, int] = {}
    for r in runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    inst = read_instance(home)
    out({"api": api.url, "healthy": health.get("ok"), "version": health.get("version"),
         "ray_address": inst.ray_address if inst else None, "ray_env": driver_env(inst), "runs": counts})
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    api = Api(args.settings.home_dir(), args.api, args.settings)
    runs = api.request("GET", "/runs?limit=1000")
    if args.json:
        out(runs)
        return EXIT_OK
    if not runs:
        print("no runs")
        return EXIT_OK
    print(f"{'ID':<14}{'WORKFLOW':<12}{'STATUS':<11}{'CREATED':<21}VALUE")
    for r in runs:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"]))
        print(f"{r['id']:<14}{r['workflow']:<12}{r['status']:<11}{created:<21}{json.dumps(r.get('value'))}")
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    api = Api(args.settings.home_dir(), args.api, args.settings)
    out(api.request("POST", f"/runs/{api.resolve(args.run)}/cancel"))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """The notes workflow end to end on the Ray-hosted tiny model, self-contained: no `up` needed.

    Builds the tiny model if missing, starts a private Ray and the LLM app, runs notes with the writer on the model
    and this process as the editor, prints the pick history, the notes and the cache table, then stops it all.
    """
    from jr2ray.demo import run_demo

    if getattr(args, "home", None):
        os.environ["JR2RAY_HOME"] = str(args.settings.home_dir())
    return run_demo(timeout_s=args.timeout)


def cmd_bench(args: argparse.Namespace) -> int:
    """The prefix-cache suite (benchmarks/prefix_cache in a source checkout); the rest of the line is its argv."""
    from jr2ray.bench import main as bench_main

    if getattr(args, "home", None):
        os.environ["JR2RAY_HOME"] = str(args.settings.home_dir())
    rest = list(args.rest)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    try:
        return int(bench_main(rest) or 0)
    except SystemExit as exc:  # the suite's own argparse: keep its usage exit code
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def cmd_model(args: argparse.Namespace) -> int:
    from jr2ray.tinymodel import build_tiny, file_hashes

    if getattr(args, "home", None):
        os.environ["JR2RAY_HOME"] = str(args.settings.home_dir())
    out_dir = build_tiny(Path(args.out) if args.out else None, seed=args.seed, progress=say)
    for name, digest in file_hashes(out_dir).items():
        print(f"{digest}  {name}")
    print(out_dir)
    return EXIT_OK


def cmd_settings(args: argparse.Namespace) -> int:
    """Every setting's effective value and where it came from (flag, environment, file, default); secrets masked."""
    rows = describe(args.settings, args.env_file, {"home": args.home, "api": args.api})
    if args.json:
        out(rows)
        return EXIT_OK
    width = max(len(r["env"]) for r in rows) + 2
    for r in rows:
        value = r["value"]
        shown = ",".join(value) if isinstance(value, list) else ("" if value is None else str(value))
        print(f"{r['env']:<{width}}{shown or '-':<40} {r['source']}")
    return EXIT_OK


# ---- parser --------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors exit 2, with the usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jr2ray", description="Statechart-driven LLM agent workflows on Ray.")
    p.add_argument("--home", help="instance directory (default $JR2RAY_HOME or ~/.jr2ray)")
    p.add_argument("--api", help="API base URL (default $JR2RAY_API, else the one `up` recorded)")
    p.add_argument("--env-file", help="read settings from this KEY=value file too (default $JR2RAY_ENV_FILE)")
    common = _Parser(add_help=False)  # the same options after the command, too
    common.add_argument("--home", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("--api", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("--env-file", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add = sub.add_parser

    def sub_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        return add(name, parents=[common], **kw)

    sub.add_parser = sub_parser  # type: ignore[method-assign,assignment]

    up = sub.add_parser("up", help="start or join Ray, deploy the API; print seats and warnings")
    up.add_argument("--address", help="join this Ray cluster instead of starting one")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP port of the API (Serve's proxy)")
    up.add_argument("--ray-port", type=int, help="GCS port of a Ray head started here (default 6379 or free)")
    up.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of a Ray head started here")
    up.add_argument("--temp-dir", help="Ray temp dir of a head started here (default /tmp/jr2ray-<home hash>)")
    up.add_argument("--llm", choices=("cpu", "gpu", "none"), default="none", help="also deploy the vLLM app")
    up.add_argument("--launcher", default="auto",
                    help="TurnLauncher for new runs: auto (the Harness if installed), none, or module:attr")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop the Ray this home started (or remove the API from a joined one)")
    down.set_defaults(func=cmd_down)

    run = sub.add_parser("run", help="start a run and stream its activity; print the final status as JSON")
    run.add_argument("workflow")
    run.add_argument("--input", required=True, help="the run's input as JSON (or @file.json)")
    run.add_argument("--detach", action="store_true", help="print the new run's status and return at once")
    run.set_defaults(func=cmd_run)

    send = sub.add_parser("send", help="send an event through an open Gate")
    send.add_argument("run", help="run id or an unambiguous prefix (4+ characters)")
    send.add_argument("--gate", required=True)
    send.add_argument("--event", required=True)
    send.add_argument("--input", default="{}", help="the event's payload as JSON (or @file.json)")
    send.set_defaults(func=cmd_send)

    status = sub.add_parser("status", help="a run's status, or the instance's")
    status.add_argument("run", nargs="?")
    status.set_defaults(func=cmd_status)

    runs = sub.add_parser("runs", help="list runs")
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(func=cmd_runs)

    cancel = sub.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run")
    cancel.set_defaults(func=cmd_cancel)

    demo = sub.add_parser("demo", help="the notes workflow end to end on the Ray-hosted tiny model")
    demo.add_argument("--timeout", type=float, default=600.0)
    demo.set_defaults(func=cmd_demo)

    bench = sub.add_parser("bench", help="the prefix-cache benchmark suite (`jr2ray bench --help` for its options)",
                           add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the suite")
    bench.set_defaults(func=cmd_bench)

    settings = sub.add_parser("settings", help="print every setting's effective value and where it came from")
    settings.add_argument("--json", action="store_true")
    settings.set_defaults(func=cmd_settings)

    model = sub.add_parser("model", help="local model tools")
    msub = model.add_subparsers(dest="model_command", required=True, parser_class=_Parser)
    tiny = msub.add_parser("build-tiny", help="build the tiny random-weight model for CPU vLLM")
    tiny.add_argument("--out", help="output dir (default $JR2RAY_HOME/models/tiny)")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=cmd_model)
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


def _load(args: argparse.Namespace) -> Settings:
    """The settings, read once for this command; an env file's values are exported so child processes see them."""
    try:
        settings = load_settings(args.env_file, home=args.home, api=args.api)
    except (OSError, ValueError) as exc:
        raise CliError(f"bad settings: {exc}", EXIT_USAGE) from None
    from jr2ray.settings import file_values

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
        args.settings = _load(args)
        return int(args.func(args))
    except CliError as exc:
        say(f"jr2ray: {exc}")
        return exc.code
    except KeyboardInterrupt:
        return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
