"""An instance: what `up` records in <home>/instance.json, and the `up` and `down` commands that make and end it.

Only `up`/`down` (and `model`, `bench`, `demo`) touch Ray or the machine directly; every other command goes through
the HTTP API.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from jr2ray.cli import errors
from jr2ray.cli.config import keep, resolve_up
from jr2ray.cli.errors import EXIT_OK
from jr2ray.cli.format import admission_on, no_harness, no_model_served, print_workflows, say, up_banner
from jr2ray.cli.rayproc import (
    GCS_LAUNCH_FILE,
    check_ray_port,
    clear_gcs_state,
    join_ray,
    ray_pids,
    start_ray,
    stop_pids,
)
from jr2ray.cli.stores import left_behind
from jr2ray.code_digest import code_digest
from jr2ray.instance_record import (  # noqa: F401
    DEFAULT_PORT,
    INSTANCE_FILE,
    Instance,
    driver_env,
    launcher_setting,
    read_instance,
    write_instance,
)
from jr2ray.run.head import head_state
from jr2ray.run.placement import describe as describe_placement
from jr2ray.run.placement import mode_for
from jr2ray.run.store import UnknownStoreScheme, is_shared
from jr2ray.settings import ENV_NAMES, Settings, printable_store
from jr2ray.settings import run_env as settings_run_env


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
    raise errors.did_not_answer(url, timeout_s, last)


def _workflow_names(modules: list[str]) -> list[str]:
    """The catalog `up` will serve, checked before anything starts: a module that does not import is a usage error."""
    from jr2ray.run.catalog import CatalogError, list_workflows

    try:
        return list_workflows(modules)
    except CatalogError as exc:
        raise errors.bad_workflows(exc) from None


def _harness_workflows(names: list[str], modules: list[str], local_only: bool = True) -> list[str]:
    """The workflows with an Agent the Harness plays (`local_only`: with a `local/` model, one served by `--llm`)."""
    from jr2ray.authoring import AgentSpec
    from jr2ray.run.catalog import load_workflow

    found = []
    for name in names:
        actors = getattr(load_workflow(name, modules), "actors", {}) or {}
        if any(isinstance(a, AgentSpec) and a.driver == "harness" and
               (a.model.startswith("local/") or not local_only) for a in actors.values()):
            found.append(name)
    return found


def starts_harness(launcher: str | None) -> bool:
    """Will runs started with this `--launcher` get a Harness, the only thing here that calls a model? "none" never;
    "auto" when the Harness imports; a `module:attr` launcher is taken to (it may well call one)."""
    from jr2ray.run.client import resolve_launcher

    return resolve_launcher(launcher) is not None


def no_model_configured(llm: str, settings: Settings) -> bool:
    """`up` serves no model and none was named (JR2RAY_LOCAL_BASE_URL unset): a Harness has nowhere to call."""
    return llm == "none" and "local_base_url" not in settings.model_fields_set


def own_model_url(host: str, port: int) -> str:
    """Where runs of a model-less `up` send model calls: this API's /v1, which answers "no model is served here"
    (serve/api/routes/model.py), so the Agent faults with that reason rather than calling whatever else listens on
    the default port."""
    return f"http://{host}:{port}/v1"


def model_warning(llm: str, settings: Settings, names: list[str], modules: list[str],
                  url: str | None = None, launcher: str | None = "auto") -> str | None:
    """What `up` says when runs here would fault on their model calls (None: a model is served or configured, or
    the launcher starts no Harness, so nothing calls one)."""
    if not no_model_configured(llm, settings) or not starts_harness(launcher):
        return None
    played = _harness_workflows(names, modules)
    return no_model_served(url or settings.local_base_url, played) if played else None


def launcher_note(launcher: str | None, names: list[str], modules: list[str]) -> str | None:
    """What `up` says when no Harness will play the seats the workflows leave to it (`--launcher none`, or "auto"
    without the Harness installed): those runs wait for a driver to play them. None when a Harness is started or no
    workflow has such a seat."""
    if starts_harness(launcher):
        return None
    played = _harness_workflows(names, modules, local_only=False)
    return no_harness(launcher_setting(launcher), played) if played else None


def cmd_up(args: argparse.Namespace) -> int:
    from serve.auth import ensure_token, token_path

    settings: Settings = args.settings
    config = resolve_up(args, settings)  # flags given now, over what the last `up` kept, over the defaults
    # Turn admission as resolved (flag, environment, kept): the LLM deploy and the API read it from these settings.
    settings = settings.model_copy(update={"turn_admission": args.turn_admission})
    check_ray_port(args.ray_port)  # a usage error before anything is kept or started
    store = _check_store(settings)
    modules = [*settings.workflows, *(m for m in args.workflows or [] if m not in settings.workflows)]
    names = _workflow_names(modules)
    home = settings.home_dir()
    keep(home, config)  # checked: the next `up` (and `connect()`) comes back on the same store and choices
    token, created = ensure_token(home)
    try:
        inst = _bring_up(home, args, settings, modules)
    except BaseException:
        if created:  # never shown: drop it, so the `up` that succeeds creates and prints one
            token_path(home).unlink(missing_ok=True)
        raise
    print(up_banner(inst.api, inst.ray_address, inst.temp_dir, token, str(token_path(home)), created))
    print(f"store: {printable_store(store)}")
    print(f"metrics: {metrics_url(inst)} (Prometheus; cluster/prometheus.yml scrapes it)")
    print(describe_placement(mode_for(is_shared(store), settings.run_placement)))
    print_workflows(names, modules)
    from jr2ray.cli.versions_cmd import print_up

    print_up(settings, modules)  # each workflow's version for new runs; runs on older ones; runs that cannot load
    for behind in left_behind(store, config.stores):
        say(behind)
    if warning := model_warning(args.llm, settings, names, modules, own_model_url(args.host, args.port),
                                args.launcher):
        say(warning)
    if note := launcher_note(args.launcher, names, modules):
        say(note)
    if settings.turn_admission:
        say(admission_on(settings.turn_admission_app, args.llm))
    return EXIT_OK


def _check_store(settings: Settings) -> str:
    """The store this `up` serves: --store / JR2RAY_STORE, else the one the live instance recorded, else
    <home>/runs. A database that does not answer, or a placement it cannot serve, stops `up` before Ray starts."""
    from jr2ray.run.placement import PlacementError, mode_for
    from jr2ray.run.store import open_store, ping

    store = settings.store_location()
    try:
        mode_for(is_shared(store), settings.run_placement)
    except (PlacementError, UnknownStoreScheme) as exc:
        raise errors.bad_store(str(exc)) from None
    try:
        ping(store)
        open_store(store, settings)  # reachable, and made or migrated to the newest schema
    except Exception as exc:  # noqa: BLE001 - psycopg's errors name no password; ours masks the URL
        raise errors.bad_store(f"the store {printable_store(store)} does not answer: "
                               f"{type(exc).__name__}: {exc}") from None
    return store


def _run_env(args: argparse.Namespace, modules: list[str]) -> tuple[dict[str, str] | None, Any]:
    """(env of new Run actors, the LLM module or None). Runs must reach the model where this `up` serves it, and
    import the workflows it was given."""
    run_env: dict[str, str] | None = None
    llm: Any = None
    if args.llm != "none":
        try:
            from serve import llm
        except ImportError as exc:
            raise errors.llm_unavailable(args.llm, exc) from None
        entry = llm.llm_application(args.llm)
        run_env = settings_run_env()
        run_env.setdefault("JR2RAY_LOCAL_BASE_URL", llm.base_url_for(args.host, args.port, entry.route_prefix))
        for key, value in llm.masking_caps_env(args.llm).items():  # the served model's caps, as its profile says
            run_env.setdefault(key, value)
    elif no_model_configured(args.llm, args.settings):
        run_env = settings_run_env()
        run_env["JR2RAY_LOCAL_BASE_URL"] = own_model_url(args.host, args.port)
    if modules:
        run_env = run_env if run_env is not None else settings_run_env()
        run_env["JR2RAY_WORKFLOWS"] = ",".join(modules)
    return run_env, llm


def _bring_up(home: Path, args: argparse.Namespace, settings: Settings, modules: list[str]) -> Instance:
    """Start or join Ray, deploy the API (and the LLM app); the instance file is written as soon as Ray is up."""
    os.environ["JR2RAY_HOME"] = str(home)  # every process started from here resolves the same home
    store = settings.store_location()  # and the same journal store (`--store`, JR2RAY_STORE, or the last `up`'s)
    os.environ["JR2RAY_STORE"] = store
    if modules:
        os.environ["JR2RAY_WORKFLOWS"] = ",".join(modules)
    export_turn_admission(settings.turn_admission)  # before `_run_env` below: the runs' env carries it
    inst = _start_or_join(home, args, settings)
    # The code its registry and hosts run: this `up`'s, unless it joined the Ray this home started before, whose
    # registry and pooled hosts go on (with the code recorded then).
    inst.code = inst.code or code_digest()
    inst.launcher = launcher_setting(args.launcher)  # what this instance's runs start with, for `connect()`
    write_instance(home, inst)  # `down` can clean up even if the rest of `up` fails

    join_ray(inst, home)
    import ray

    inst.metrics_port = inst.metrics_port or head_metrics_port()  # a joined Ray's own, as its head reports it

    try:
        from serve.api import ApiConfig, deploy_api
        from serve.api.config import LOCAL_HOSTS

        run_env, llm = _run_env(args, modules)
        # Given whole, never left to the replica's own environment: the pool `warm_pool` fills below is keyed by
        # the env (and launcher) runs start with, so both must be known here.
        api_env = run_env if run_env is not None else settings_run_env()
        config = ApiConfig(home=str(home), store=store, launcher=args.launcher, run_env=api_env, workflows=modules,
                           virtual=settings.virtual_runs,
                           max_input=settings.max_run_input, hosts=[*LOCAL_HOSTS, *settings.api_hosts],
                           turn_admission=settings.turn_admission, turn_admission_app=settings.turn_admission_app)
        url = deploy_api(config, host=args.host, port=args.port, request_timeout_s=settings.api_request_timeout_s)
        inst.api, inst.host, inst.port = url, args.host, args.port
        write_instance(home, inst)
        _wait_http(f"{url}/healthz", 180)
        if llm is not None:
            say(f"deploying the LLM app ({args.llm}); this takes a minute or two")
            base = llm.deploy(args.llm, settings=settings, host=args.host, port=args.port, progress=say,
                              kv_blocks=args.kv_blocks or None)
            say(f"LLM app: {base}")
        from jr2ray.run.client import Client

        client = Client(store=store, settings=settings)
        resumed = _resume(client, run_env, settings)
        if client.virtual:
            from serve.api.context import ApiContext

            api = ApiContext(config)  # the env and launcher the API starts runs with: the pool its runs take from
            warm_pool(client.registry(), api.run_env(), api.launcher, resumed)
    finally:
        ray.shutdown()
    return inst


def _start_or_join(home: Path, args: argparse.Namespace, settings: Settings) -> Instance:
    """The Ray this `up` serves on: the one named (`--address`, RAY_ADDRESS), the one this home started if it still
    answers, else a fresh head (what is left of a dead one stopped first, by pid)."""
    prev = read_instance(home)
    address = args.address or settings.ray_address
    if address:
        say(f"joining Ray at {address}")
        return Instance(api="", ray_address=address, started_ray=False)
    if prev is not None and prev.started_ray and (state := head_state(prev)).state == "up":
        say(f"joining the Ray this home started before, at {prev.ray_address}")
        return prev
    if prev is not None and prev.started_ray:  # recorded, but dead or dying: clear what is left of it, by pid
        left = ray_pids(prev.temp_dir, prev.ray_address) if prev.temp_dir else []
        stop_pids(left)
        say(f"the Ray this home started at {prev.ray_address} is gone ({state.reason}); stopped its "
            f"{len(left)} leftover process(es); starting a fresh one")
    return start_ray(home, settings, temp_dir=args.temp_dir, ray_port=args.ray_port, num_cpus=args.num_cpus,
                     cluster=args.cluster, metrics_port=args.metrics_port, gcs_redis=args.gcs_redis or None)


def _resume(client: Any, run_env: dict[str, str] | None, settings: Settings) -> list[str]:
    """Every active run goes on from its journal: timers, Gates, open Turns, cancel. Virtual runs that were parked
    stay parked until what they wait for comes; the ones that were working are woken now (counted before: an
    overdue timer may finish a run as soon as it wakes). Then the retention purge. The ids woken now."""
    before = len(client.store.list_runs(status="active")) if client.virtual else 0
    # A resumed run's Harness follows this `up`'s Turn admission too, even when nothing else of its env changes.
    resumed: list[str] = client.resume(env=run_env if run_env is not None else admission_env(settings.turn_admission))
    active = before if client.virtual else len(resumed)
    if active:
        parked = f" ({len(resumed)} woken now, the others parked until a Gate event, a pick or a timer)"
        say(f"resumed {active} active run(s) from their journals" + (parked if client.virtual else ""))
    if purged := client.gc():  # retention, by the instance itself (`jr2ray gc` does the same by hand)
        say(f"purged {len(purged)} run(s) finished more than {settings.retention_days:g} days ago")
    return resumed


def admission_env(on: bool) -> dict[str, str]:
    """This `up`'s Turn admission as the runs' env says it: "true" or "false", never left unset, so the choice
    overrides whatever the environment, or an older run's journaled env, said."""
    return {ENV_NAMES["turn_admission"]: "true" if on else "false"}


def export_turn_admission(on: bool) -> None:
    """Put this `up`'s Turn admission in the environment: the runs' Harnesses read it from the JR2RAY_* env handed
    to Run actors (`_run_env`, `settings.run_env`)."""
    os.environ.update(admission_env(on))


# Host slots per `warm` call, so the first hosts are ready in a second or two rather than when the whole pool has
# started (the registry starts a process for every `runs_per_host` slots asked, counted across calls).
WARM_CHUNK = 2


def head_metrics_port() -> int | None:
    """The metrics export port of the joined Ray's head node (every node has its own; Prometheus scrapes each)."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    head = next((n for n in nodes if n.get("Resources", {}).get("node:__internal_head__")), nodes[0] if nodes else {})
    port = head.get("MetricsExportPort")
    return int(port) if port else None


def metrics_url(inst: Instance) -> str:
    """Where Prometheus scrapes the head node's metrics (jr2ray's series and Ray's, vLLM's when served)."""
    host = inst.ray_address.rpartition(":")[0] or "127.0.0.1"
    return f"http://{host}:{inst.metrics_port}/metrics" if inst.metrics_port else "unknown"


def warm_pool(registry: Any, env: dict[str, str], launcher: str | None, busy: list[str]) -> int:
    """Fill the pool of virtual-run hosts to the registry's live-run slots (`JR2RAY_MAX_LIVE_RUNS`, else sized from
    memory: `Settings.live_run_slots`) in the background, so the first burst of runs starts no process. Hosts
    already there count (a second `up` of a live instance adds none), and so do the runs `busy` holds (the ones
    `resume` is waking; each takes a host of its own). `up` does not wait for the processes: the registry starts
    them after `up` has returned. Best effort: a pool left cold only makes the first runs slower, so a failure here
    is said, not raised. Returns how many hosts are being started."""
    import ray

    try:
        stats = ray.get(registry.stats.remote(), timeout=60)
        slots = int(stats["max_live"])  # the registry's own: the one a running instance was started with
        want = max(0, slots - stats["idle_hosts"] - len(set(stats["live"]) | set(busy)))
        # Not awaited: the hosts start after `up` returns. Each call also says this is the instance's pool, which
        # runs a script starts with no env of their own share (said even with nothing to start: a new registry).
        for size in [min(WARM_CHUNK, want - at) for at in range(0, want, WARM_CHUNK)] or [0]:
            registry.warm.remote(size, env, launcher, True)
        ray.get(registry.ping.remote(), timeout=60)  # a later call on the same handle: the warms have reached it
    except Exception as exc:  # noqa: BLE001 - the instance is up either way
        say(f"could not warm the run host pool ({type(exc).__name__}: {exc}); runs start their hosts as they come")
        return 0
    if want:
        say(f"warming {want} run host(s) in the background, to one per live-run slot ({slots})")
    return int(want)


def cmd_down(args: argparse.Namespace) -> int:
    home = args.settings.home_dir()
    inst = read_instance(home)
    if inst is None:
        raise errors.no_instance(home / INSTANCE_FILE)
    if not inst.started_ray and head_state(inst).state == "gone":  # nothing to join, nothing of ours to stop
        say(f"the Ray this home joined at {inst.ray_address} does not answer; nothing was removed there; this home "
            "no longer records it")
    elif not inst.started_ray or not inst.temp_dir:
        join_ray(inst, home)
        import ray
        from ray import serve

        try:
            from serve.api import APP_NAME

            serve.delete(APP_NAME)
        finally:
            ray.shutdown()
        say("removed the API app; the Ray cluster was joined, not started, so it keeps running")
    else:
        stop_pids(ray_pids(inst.temp_dir, inst.ray_address))
        say(f"stopped the Ray this home started ({inst.ray_address})")
        if inst.gcs_redis and inst.gcs_namespace:  # its GCS state too: a later head must not adopt it
            try:
                clear_gcs_state(inst.gcs_redis, inst.gcs_namespace, args.settings)
            except Exception as exc:  # noqa: BLE001 - the next `up` clears it again before it starts
                say(f"could not clear its GCS state in Redis at {inst.gcs_redis} ({type(exc).__name__}); the next "
                    "`up` clears it")
    (home / GCS_LAUNCH_FILE).unlink(missing_ok=True)
    (home / INSTANCE_FILE).unlink(missing_ok=True)  # config.json stays: the next `up` comes back as this one was
    return EXIT_OK
