"""`up`'s choices, kept: the flags an `up` was given over what the home's config.json kept, over the defaults.

A plain `up` after `down` therefore comes back as the last `up` left it (same store, ports, workflows, launcher,
model, Turn admission); a flag given now replaces the kept value and is kept in its turn.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from jr2ray.instance_config import InstanceConfig, read_config, write_config
from jr2ray.instance_record import DEFAULT_PORT
from jr2ray.settings import Settings

# What `up` does when neither a flag nor the kept config says otherwise.
UP_DEFAULTS: dict[str, Any] = {"host": "127.0.0.1", "port": DEFAULT_PORT, "num_cpus": 4, "cluster": False,
                               "llm": "none", "ray_port": None, "temp_dir": None,
                               "metrics_port": None, "gcs_redis": None, "kv_blocks": 0}


def resolve_up(args: argparse.Namespace, settings: Settings) -> InstanceConfig:
    """Fill `args` (whose up-only flags default to None: "not given") from the kept config, then the defaults;
    return the config to keep once this `up` has checked what it was given. The store is the settings' own
    (`--store`, JR2RAY_STORE, else the kept one), the launcher `--launcher`, else JR2RAY_LAUNCHER when set,
    else the kept one, else auto, and Turn admission as `turn_admission` says (`args.turn_admission` becomes a
    bool)."""
    home = settings.home_dir()
    kept = read_config(home) or InstanceConfig()
    for key, default in UP_DEFAULTS.items():
        if getattr(args, key, None) is None:
            kept_value = getattr(kept, key)
            setattr(args, key, kept_value if kept_value is not None else default)
    if args.launcher is None:
        env_given = "launcher" in settings.model_fields_set
        args.launcher = settings.launcher if env_given or kept.launcher is None else kept.launcher
    args.turn_admission = turn_admission(getattr(args, "turn_admission", None), settings, kept)
    given_workflows = args.workflows
    if given_workflows is None and kept.workflows:
        args.workflows = list(kept.workflows)
    store = settings.store_location()
    config = kept.merged({"store": store, "launcher": args.launcher, "workflows": given_workflows,
                          "turn_admission": args.turn_admission, **{key: getattr(args, key) for key in UP_DEFAULTS}})
    return config.with_store_seen(store)


def turn_admission(flag: str | None, settings: Settings, kept: InstanceConfig) -> bool:
    """Is Turn admission on for this `up`? `--turn-admission on|off`, else JR2RAY_TURN_ADMISSION when it is set
    (in the environment or the env file), else what the last `up` kept, else off. Kept whichever way it was chosen,
    so a plain `up` after `down` does not silently turn it off."""
    if flag is not None:
        return flag == "on"
    if "turn_admission" in settings.model_fields_set or kept.turn_admission is None:
        return settings.turn_admission
    return kept.turn_admission


def keep(home: Path, config: InstanceConfig) -> None:
    """Write what this `up` was told, for the next `up`, `connect()` and `jr2ray settings`."""
    write_config(home, config)
