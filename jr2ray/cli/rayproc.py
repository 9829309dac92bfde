"""The Ray processes an instance owns: starting a head beside other Ray instances, joining it, and stopping exactly
its processes (by pid, found through the head's own temp dir; never by name)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from jr2ray.cli import errors
from jr2ray.cli.format import say
from jr2ray.instance_config import write_private
from jr2ray.instance_record import Instance
from jr2ray.run.ray_start import with_instance_ray_env
from jr2ray.settings import Settings

if TYPE_CHECKING:
    import psutil

RAY_TOKEN_FILE = "ray_auth_token"
# How the head's GCS was started (`up --gcs-redis`), kept in the home so `supervise` can start that GCS again alone
# even if it never saw it run (started after the GCS died, or the GCS killed before its first check).
GCS_LAUNCH_FILE = "gcs_launch.json"
RAY_START_ATTEMPTS = 3
# The ports `ray start` gives its workers (its --min-worker-port/--max-worker-port defaults, which `up` keeps): a
# GCS port among them is refused before Ray starts, since a worker would sooner or later take it.
RAY_WORKER_PORTS = (10002, 19999)


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


def alive(address: str) -> bool:
    host, _, port = address.rpartition(":")
    return port.isdigit() and port_open(host or "127.0.0.1", int(port))


def ray_env(home: Path, inst: Instance | None = None, live_run_slots: int = 0) -> dict[str, str]:
    """The environment for `ray start` and for joining: the instance's Ray auth settings override the caller's.
    `live_run_slots`: the warm hosts the node's pool keeps (a head started here), which its Ray is sized for."""
    env = with_instance_ray_env(dict(os.environ), live_run_slots)  # the Ray settings of every instance jr2ray starts
    env["JR2RAY_HOME"] = str(home)
    # A loaded 2-core box can take longer than Ray's default to start the node agent; do not fail `up` for that.
    env.setdefault("RAY_agent_register_timeout_ms", "120000")
    if inst is not None and inst.ray_auth_mode:
        env["RAY_AUTH_MODE"] = inst.ray_auth_mode
    if inst is not None and inst.ray_auth_token_path:
        env["RAY_AUTH_TOKEN_PATH"] = inst.ray_auth_token_path
        env.pop("RAY_AUTH_TOKEN", None)  # it would win over the path
    return env


def ray_auth(home: Path, settings: Settings) -> tuple[str | None, str | None]:
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


def join_ray(inst: Instance, home: Path) -> None:
    """Connect this process as a driver. The RAY_* env must be set before Ray reads its config (at import)."""
    for k, v in ray_env(home, inst).items():
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
    from jr2ray.run.loopback import is_loopback_address, keep_loopback

    if is_loopback_address(inst.ray_address):  # a head `up` started on one machine listens on loopback only
        keep_loopback()
    try:
        ray.init(address=inst.ray_address, namespace="jr2ray", log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, TimeoutError, RuntimeError) as exc:  # a head that is gone or dying: one line
        raise errors.ray_unreachable(home, inst.ray_address, f"{type(exc).__name__}: {str(exc)[:200]}") from None


LOOPBACK = "127.0.0.1"


def _start_cmd(gcs_port: int, num_cpus: int, temp_dir: str, cluster: bool = False,
               metrics_port: int | None = None, redis_password: str | None = None) -> list[str]:
    """`ray start --head` on free ports throughout, so it can sit beside other Ray instances on this machine.

    Without `cluster`, every Ray port (GCS, raylet, object manager, agents, workers) binds loopback only: the node
    address is 127.0.0.1, kept as given by `jr2ray.cli.raystart`. With `cluster`, Ray picks the routable address
    other nodes can join."""
    where = ["ray.scripts.scripts"] if cluster else ["jr2ray.cli.raystart"]
    bind = [] if cluster else ["--node-ip-address", LOOPBACK]
    return [sys.executable, "-m", *where, "start", "--head", "--port", str(gcs_port), *bind,
            "--num-cpus", str(num_cpus), "--disable-usage-stats", "--include-dashboard", "false",
            "--temp-dir", temp_dir, "--dashboard-port", str(free_port()),
            "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
            "--dashboard-agent-grpc-port", str(free_port()), "--metrics-export-port", str(metrics_port or free_port()),
            "--runtime-env-agent-port", str(free_port()),
            *(["--redis-password", redis_password] if redis_password else [])]


def metrics_port_for(settings: Settings, given: int | None) -> int:
    """The metrics export port of a head started here: `--metrics-port`, else the setting; 0 means a free one. A
    port that is taken fails `up` when it was asked for, and gives way to a free one (said) when it is the default."""
    from jr2ray.settings import DEFAULT_METRICS_PORT

    port = settings.metrics_port if given is None else given
    if port == 0:
        return free_port()
    if port_open("127.0.0.1", port):
        if given is None and port == DEFAULT_METRICS_PORT:
            free = free_port()
            say(f"metrics port {port} is taken (another instance?); Ray's metrics go to port {free} instead")
            return free
        raise errors.metrics_port_taken(port)
    return port


def check_ray_port(port: int | None) -> None:
    """A GCS port `up` may start a head on: a TCP port, and outside Ray's worker ports. Checked before anything."""
    if port is None:
        return
    if not 0 < port < 65536:
        raise errors.bad_ray_port(port)
    low, high = RAY_WORKER_PORTS
    if low <= port <= high:
        raise errors.ray_port_in_worker_range(port, low, high)


def redis_parts(address: str) -> tuple[str, int, bool]:
    """(host, port, ssl) of a `host:port`, `redis://host:port` or `rediss://host:port` Redis address."""
    scheme, sep, rest = address.partition("://")
    hostport = rest if sep else address
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise errors.gcs_redis_unreachable(address, "not host:port")
    return host.strip("[]"), int(port), scheme == "rediss"


def gcs_namespace(home: Path) -> str:
    """The key prefix of this home's GCS state in a shared Redis (Ray's external_storage_namespace): one per home,
    so two instances can share a Redis."""
    import hashlib

    return f"jr2ray-{hashlib.sha1(str(home).encode()).hexdigest()[:10]}"


def clear_gcs_state(address: str, namespace: str, settings: Settings) -> None:
    """Delete this home's GCS state from its Redis. A fresh head must not find a dead head's state there: Ray's GCS
    would take it for its own (the old session, its dead actors) and restore it. Ray's own cleanup, as KubeRay's
    does when a cluster is deleted."""
    from ray._private.gcs_utils import cleanup_redis_storage

    host, port, ssl = redis_parts(address)
    password = settings.ray_redis_password.get_secret_value() if settings.ray_redis_password else ""
    cleanup_redis_storage(host, port, password, ssl, namespace)


def gcs_redis_env(address: str, namespace: str) -> dict[str, str]:
    """What `ray start --head` and its GCS read to keep the GCS state in Redis (Ray's GCS fault tolerance)."""
    return {"RAY_REDIS_ADDRESS": address, "RAY_external_storage_namespace": namespace}


class GcsLaunch(BaseModel):
    """How the head's GCS process was started, seen while it ran: what starting it again takes. `ray_started_at`
    names the head it belongs to (`Instance.ray_started_at`), so a record of an earlier head is never used."""

    pid: int
    cmdline: list[str]
    env: dict[str, str]
    cwd: str
    ray_started_at: str | None = None

    def of_head(self, inst: Instance) -> bool:
        """Is this the launch of `inst`'s head (not an earlier head's on the same home)?"""
        return self.ray_started_at == inst.ray_started_at


def gcs_launch(temp_dir: str, ray_started_at: str | None = None) -> GcsLaunch | None:
    """The running GCS of the head with this temp dir, as it was started (None: none, or more than one)."""
    import psutil

    from jr2ray.run.head import vital_pids

    pids = vital_pids(temp_dir)["gcs_server"]
    if len(pids) != 1:
        return None
    try:
        p = psutil.Process(pids[0])
        return GcsLaunch(pid=p.pid, cmdline=p.cmdline(), env=p.environ(), cwd=p.cwd(), ray_started_at=ray_started_at)
    except psutil.Error:
        return None


def keep_gcs_launch(home: Path, inst: Instance) -> None:
    """Record how the new head's GCS runs (0600: its environment may hold secrets); none for a GCS without Redis."""
    (home / GCS_LAUNCH_FILE).unlink(missing_ok=True)
    if inst.gcs_redis and inst.temp_dir and (launch := gcs_launch(inst.temp_dir, inst.ray_started_at)) is not None:
        write_private(home / GCS_LAUNCH_FILE, launch.model_dump_json() + "\n")


def kept_gcs_launch(home: Path, inst: Instance) -> GcsLaunch | None:
    """The GCS launch `up` kept for this very head (None: none kept, unreadable, or an earlier head's)."""
    try:
        launch = GcsLaunch.model_validate_json((home / GCS_LAUNCH_FILE).read_text())
    except (OSError, ValueError):
        return None
    return launch if launch.of_head(inst) else None


def _use_gcs_redis(home: Path, address: str, settings: Settings) -> str:
    """Check the Redis answers and clear this home's old state there; returns the namespace a new head uses."""
    host, port, _ssl = redis_parts(address)
    if not port_open(host, port, timeout=2.0):
        raise errors.gcs_redis_unreachable(address, f"nothing listens on {host}:{port}")
    namespace = gcs_namespace(home)
    try:
        clear_gcs_state(address, namespace, settings)
    except Exception as exc:  # noqa: BLE001 - a Redis that refuses us (auth, protocol) is the operator's to fix
        raise errors.gcs_redis_unreachable(address, f"{type(exc).__name__}: {str(exc)[:200]}") from None
    return namespace


def start_ray(home: Path, settings: Settings, *, temp_dir: str | None, ray_port: int | None,
              num_cpus: int, cluster: bool = False, metrics_port: int | None = None,
              gcs_redis: str | None = None) -> Instance:
    """`ray start --head` with its own temp dir and free ports.

    On a loaded machine the raylet can miss Ray's fixed 30 s registration window ("The current node timed out during
    startup"), and a failed `ray start` leaves its GCS and helpers running. So a failed attempt is cleaned up (every
    process naming this home's temp dir) and retried, up to RAY_START_ATTEMPTS times.

    `gcs_redis`: the GCS keeps its state in that Redis (Ray's GCS fault tolerance), under this home's namespace,
    cleared first (see `clear_gcs_state`).
    """
    import hashlib

    temp_dir = temp_dir or f"/tmp/jr2ray-{hashlib.sha1(str(home).encode()).hexdigest()[:10]}"
    auth_mode, token_path = ray_auth(home, settings)
    metrics = metrics_port_for(settings, metrics_port)
    namespace = _use_gcs_redis(home, gcs_redis, settings) if gcs_redis else None
    inst = Instance(api="", ray_address="", started_ray=True, temp_dir=temp_dir, ray_auth_mode=auth_mode,
                    ray_auth_token_path=token_path, metrics_port=metrics,
                    ray_started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
                    gcs_redis=gcs_redis or None, gcs_namespace=namespace)
    env = ray_env(home, inst, settings.live_run_slots())
    password = None
    if gcs_redis and namespace:
        env.update(gcs_redis_env(gcs_redis, namespace))
        secret = settings.ray_redis_password
        password = secret.get_secret_value() if secret is not None else None
    failure = ""
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        gcs_port = ray_port or (6379 if attempt == 1 and not port_open("127.0.0.1", 6379) else free_port())
        say(f"starting Ray (head, port {gcs_port}, temp dir {temp_dir})" +
            (f", attempt {attempt} of {RAY_START_ATTEMPTS}" if attempt > 1 else "") +
            (f", GCS state in Redis at {gcs_redis}" if gcs_redis else ""))
        try:
            proc = subprocess.run(_start_cmd(gcs_port, num_cpus, temp_dir, cluster, metrics, password), env=env,
                                  check=False, capture_output=True, text=True, timeout=300)
            ok, output = proc.returncode == 0, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            ok, output = False, f"`ray start` did not return within {exc.timeout:.0f}s"
        if ok:
            host_ip = _node_ip(output) or "127.0.0.1"
            inst.ray_address = f"{host_ip}:{gcs_port}"
            keep_gcs_launch(home, inst)
            return inst
        failure = output[-3000:]
        stop_pids(ray_pids(temp_dir))  # what the failed attempt left behind
        if gcs_redis and namespace:
            clear_gcs_state(gcs_redis, namespace, settings)  # and its GCS state, which the next attempt must not adopt
        if "Token authentication" in output or "AuthenticationError" in output:
            break  # a configuration problem: retrying cannot help
    raise errors.ray_start_failed(failure)


def _node_ip(text: str) -> str | None:
    import re

    m = re.search(r"ray start --address='([^':]+):\d+'", text)
    return m.group(1) if m else None


def ray_pids(temp_dir: str, address: str | None = None) -> list[int]:
    """The processes of the Ray this home started (`jr2ray.run.head.instance_pids`): by pid, never by name."""
    from jr2ray.run.head import instance_pids

    return instance_pids(temp_dir, address)


def stop_pids(pids: list[int], grace_s: float = 8.0) -> None:
    """SIGTERM, then SIGKILL whatever is left after the grace period. Only these pids, never by name.

    The GCS goes last (`ray stop` too stops it after the rest): with the GCS still up, the raylet, the workers and
    Ray's monitor all exit on SIGTERM within a second; signalled together with the GCS, the GCS and the monitor
    both sat out the whole grace period (measured: `down` took 9.7 s, 8 of them waiting; 1.7 s this way). Each of
    the two groups has its own grace period, so a head that ignores SIGTERM throughout takes twice as long."""
    import psutil

    procs: list[psutil.Process] = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    gcs = [p for p in procs if _name(p) == "gcs_server"]
    for group in ([p for p in procs if p not in gcs], gcs):
        _terminate(group, grace_s)


def _name(proc: psutil.Process) -> str:
    import psutil

    try:
        return str(proc.name())
    except psutil.Error:
        return ""


def _terminate(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM `procs` and wait until each is gone; SIGKILL the ones left after `grace_s` (a process may save
    something on SIGTERM; none may hold `down` up for good), and wait up to 5 s more."""
    import psutil

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for p in procs:
            try:
                p.send_signal(sig)  # psutil refuses a pid reused by another process (NoSuchProcess)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        procs = _wait_gone(procs, wait_s)
        if not procs:
            return


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """The ones still running after `timeout_s` (`jr2ray.run.head.running`: a zombie counts as gone, where psutil's
    own wait would wait until its parent reaps it)."""
    from jr2ray.run.head import running

    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if running(p)]
    return left
