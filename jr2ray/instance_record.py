"""The running instance's record: `$JR2RAY_HOME/instance.json`, which `up` writes and `down` removes.

It says what is running now (the Ray address and its auth, the API's URL, the launcher its runs start with), so the
CLI, `supervise` and a driver's `jr2ray.connect()` find the instance without being told. What `up` was told, which
outlives `down`, is `jr2ray.instance_config`'s config.json; the settings read both.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from jr2ray.instance_config import write_private

INSTANCE_FILE = "instance.json"
DEFAULT_PORT = 8000


class Instance(BaseModel):
    """What `up` leaves in $JR2RAY_HOME/instance.json so later commands (and `down`) find the running instance.
    Only what a running instance needs, its launcher among them (what its runs start with, for `connect()`): what
    `up` was told (store, launcher, ports asked for) is kept in config.json (`jr2ray.instance_config`), which
    `down` keeps."""

    api: str
    ray_address: str
    started_ray: bool
    temp_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    ray_auth_mode: str | None = None  # RAY_AUTH_MODE every process of ours joins with; None: leave the env's
    ray_auth_token_path: str | None = None  # the Ray auth token of a Ray this home started (0600, in the home)
    metrics_port: int | None = None  # Ray's metrics export port (Prometheus scrapes /metrics there); None: unknown
    # When this home's Ray was started (UTC, ISO 8601): a restart on the same port and temp dir is otherwise the
    # same record, and an operator (or `supervise`'s tests) needs to tell one head from the next.
    ray_started_at: str | None = None
    # Ray's GCS fault tolerance (`up --gcs-redis`): the Redis the head's GCS keeps its state in, and the key prefix
    # (Ray's external_storage_namespace) of this head's state there. None: the GCS keeps its state in memory.
    gcs_redis: str | None = None
    gcs_namespace: str | None = None
    code: str | None = None  # the jr2ray code `up` ran (`jr2ray.code_digest`): a driver on other code is warned
    # The launcher this instance's API starts runs with, as `launcher_setting` writes it ("none": no Harness). A
    # driver's `connect()` starts its runs the same way; config.json keeps what `up` was told, for the next `up`.
    launcher: str | None = None


def read_instance(home: Path) -> Instance | None:
    path = home / INSTANCE_FILE
    if not path.exists():
        return None
    try:
        return Instance.model_validate_json(path.read_text())
    except ValueError:
        return None


def write_instance(home: Path, inst: Instance) -> None:
    """Whole or not at all, mode 0600: a supervisor or driver reading it while `up` rewrites it once saw ''."""
    write_private(home / INSTANCE_FILE, inst.model_dump_json(indent=2) + "\n")


def launcher_setting(spec: str | None) -> str:
    """A launcher as `up` records it: "none" for no Harness (None, "", "none", "external"), else as given."""
    return "none" if spec is None or spec.strip().lower() in ("", "none", "external") else spec.strip()


def driver_env(inst: Instance | None) -> dict[str, str]:
    """What a process needs in its environment to join this instance's Ray. `jr2ray.connect()` applies it itself,
    from <home>/instance.json, so a driver script copies nothing by hand."""
    if inst is None or not inst.ray_address:
        return {}
    env = {"RAY_ADDRESS": inst.ray_address}
    if inst.ray_auth_mode:
        env["RAY_AUTH_MODE"] = inst.ray_auth_mode
    if inst.ray_auth_token_path:
        env["RAY_AUTH_TOKEN_PATH"] = inst.ray_auth_token_path
    return env
