"""The instance's kept configuration: `$JR2RAY_HOME/config.json`, written by every `up` and kept by `down`.

`instance.json` says what is running now (the Ray address, its auth, the API's URL, the launcher its runs start
with) and `down` removes it. What the operator chose (the store, ports, workflows, launcher, model, Turn admission)
is kept here, so a plain `up` after `down` comes back on the same store with the same choices, and a flag given to
`up` changes the kept value.
Mode 0600: a PostgreSQL URL may carry a password.

It also remembers every store an `up` of this home has served (`stores`), so `up` can say when another one still
holds active runs (runs left behind by a move to another store).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

CONFIG_FILE = "config.json"
# The keys `up` keeps (besides `stores`); `jr2ray settings` shows those that are no setting of their own.
UP_KEYS = ("store", "host", "port", "ray_port", "num_cpus", "cluster", "temp_dir", "workflows", "launcher", "llm",
           "metrics_port", "gcs_redis", "turn_admission", "kv_blocks")


class InstanceConfig(BaseModel):
    """What `up` was told, as it last applied it; None: never given, the default applies."""

    model_config = ConfigDict(extra="ignore")

    store: str | None = None
    host: str | None = None
    port: int | None = None
    ray_port: int | None = None
    num_cpus: int | None = None
    cluster: bool | None = None
    temp_dir: str | None = None
    workflows: list[str] | None = None
    launcher: str | None = None
    llm: str | None = None
    metrics_port: int | None = None
    gcs_redis: str | None = Field(default=None, description="host:port of the Redis a head started here keeps its GCS "
                                                            "state in (Ray's GCS fault tolerance); '' turns it off.")
    turn_admission: bool | None = Field(default=None, description="Turn admission for the runs of this instance "
                                                                  "(`up --turn-admission on|off`, or "
                                                                  "JR2RAY_TURN_ADMISSION where `up` ran).")
    kv_blocks: int | None = Field(default=None, description="KV cache blocks of each vLLM engine `up --llm` "
                                                           "deploys (vLLM's num_gpu_blocks_override); 0: the "
                                                           "profile's own cache.")
    stores: list[str] = Field(default_factory=list, description="Every store an `up` of this home served, in order.")

    def merged(self, given: dict[str, Any]) -> InstanceConfig:
        """This config with the values `up` was given now (None: not given) over the kept ones."""
        return self.model_copy(update={k: v for k, v in given.items() if v is not None and k in UP_KEYS})

    def with_store_seen(self, store: str) -> InstanceConfig:
        """The same, remembering `store` among the stores this home served (each once)."""
        return self.model_copy(update={"stores": [*(s for s in self.stores if s != store), store]})


def config_path(home: Path) -> Path:
    return home / CONFIG_FILE


def read_config(home: Path) -> InstanceConfig | None:
    """The kept config, or None when this home has none. A config from before this file existed is read from the
    fields an older `up` wrote into instance.json (store, launcher)."""
    path = config_path(home)
    if path.exists():
        try:
            return InstanceConfig.model_validate_json(path.read_text())
        except ValueError:
            return None
    legacy = home / "instance.json"
    if legacy.exists():
        try:
            data = json.loads(legacy.read_text())
        except ValueError:
            return None
        if isinstance(data, dict) and data.get("store"):  # an older `up` wrote the store there; a newer never does
            return InstanceConfig(store=data.get("store"), launcher=data.get("launcher"),
                                  stores=[data["store"]] if data.get("store") else [])
    return None


def write_private(path: Path, text: str) -> None:
    """Mode 0600 from the start (a PostgreSQL store URL may carry a password), written whole then renamed into place:
    a reader (`connect()`, `status`, the supervisor) never sees an empty or half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def write_config(home: Path, config: InstanceConfig) -> None:
    write_private(config_path(home), config.model_dump_json(indent=2, exclude_none=True) + "\n")


__all__ = ["CONFIG_FILE", "UP_KEYS", "InstanceConfig", "config_path", "read_config", "write_config", "write_private"]
