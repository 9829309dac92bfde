"""The LLM app's configs: the serve config files (one YAML per profile) and the `args` they give the app.

Why this module exists: one YAML file per profile (`serve/config/cpu.yaml`, `serve/config/gpu.yaml`) is the single
source of the engine settings; it is `serve run`-compatible and is also what `builders.build_app` and `builders.deploy`
read, so dev, CI and the home-lab run the same config. `resolved_llm_configs` is where the `llm_configs` a profile
names become what `ray.serve.llm.LLMConfig` is built from.

Pure and cheap to import: no Ray, no Serve.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from jr2ray.settings import Settings

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"
PROFILES: tuple[str, ...] = ("cpu", "gpu")

SESSION_HEADER = "x-session-id"
"""Ray Serve's default session-id header (env RAY_SERVE_SESSION_ID_HEADER_KEY changes it cluster-wide)."""

TINY_SOURCE = "jr2ray:tiny"
"""A `model_source` placeholder: the locally built tiny model (`jr2ray.tinymodel.ensure_tiny`)."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_APP_NAME = "llm"


class LLMAppArgs(BaseModel):
    """The `args` of the LLM application in a serve config: what `ray.serve.llm.build_openai_app` takes.

    `model_source` may be the placeholder `jr2ray:tiny` (built on demand), a path with `~` or `$VARS`, or a hub id.
    """

    model_config = ConfigDict(extra="forbid")

    llm_configs: list[dict[str, Any]] = Field(min_length=1)
    ingress_deployment_config: dict[str, Any] = Field(default_factory=dict)
    ingress_cls_config: dict[str, Any] | None = None
    masking_caps: dict[str, int] | None = Field(
        default=None,
        description="Not the server's: the caps a Harness adds under masking for this profile's (random-weight) model.",
    )


class ServeApplication(BaseModel):
    """One entry of a serve config's `applications:` list (only the fields jr2ray reads)."""

    model_config = ConfigDict(extra="allow")

    name: str = DEFAULT_APP_NAME
    route_prefix: str | None = "/"
    import_path: str
    args: dict[str, Any] = Field(default_factory=dict)


class ServeConfigFile(BaseModel):
    """A `serve run`/`serve deploy` config file: jr2ray reads its `applications:` list."""

    model_config = ConfigDict(extra="allow")

    applications: list[ServeApplication] = Field(min_length=1)


def config_path(profile_or_path: str | Path) -> Path:
    """`cpu`/`gpu` name a file in serve/config/; anything else is taken as a path to a serve config YAML."""
    if isinstance(profile_or_path, str) and profile_or_path in PROFILES:
        return CONFIG_DIR / f"{profile_or_path}.yaml"
    path = Path(profile_or_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no serve config at {path} (profiles: {', '.join(PROFILES)})")
    return path


def load_serve_config(profile_or_path: str | Path) -> ServeConfigFile:
    """Parse and validate a profile's serve config file."""
    with config_path(profile_or_path).open() as fh:
        return ServeConfigFile.model_validate(yaml.safe_load(fh))


def llm_application(profile_or_path: str | Path) -> ServeApplication:
    """The application entry of a serve config that this module builds (import path `serve.llm:...`)."""
    cfg = load_serve_config(profile_or_path)
    for app in cfg.applications:
        if app.import_path.startswith("serve.llm:"):
            return app
    raise ValueError(f"{config_path(profile_or_path)} has no application built by serve.llm")


def resolve_model_source(source: str, settings: Settings, progress: Callable[[str], None] | None = None) -> str:
    """Turn the config's model_source into something vLLM can load on this node (the tiny model under the
    settings' home)."""
    if source == TINY_SOURCE:
        from jr2ray.tinymodel import ensure_tiny

        return str(ensure_tiny(settings, progress))
    return os.path.expanduser(expand_env(source))


_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}"
                      r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)")


def expand_env(text: str, env: Mapping[str, str] | None = None) -> str:
    """Expand `$VAR`, `${VAR}` and `${VAR:-default}` (shell style); an unset variable without default stays as is."""
    env = os.environ if env is None else env  # the variables a config names are its own, not jr2ray's settings

    def sub(m: re.Match[str]) -> str:
        name = m.group("name") or m.group("bare")
        if name in env and (env[name] or m.group("default") is None):
            return env[name]
        if m.group("default") is not None:
            return m.group("default")
        return m.group(0)

    return _ENV_REF.sub(sub, text)


def resolved_llm_configs(args: LLMAppArgs, settings: Settings,
                         progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The llm_configs with model sources resolved (tiny model built if missing); the input is not modified."""
    out: list[dict[str, Any]] = []
    for raw in args.llm_configs:
        cfg = copy.deepcopy(raw)
        cfg.setdefault("log_engine_metrics", True)  # vLLM engine metrics beside jr2ray's, in any config
        loading = cfg.setdefault("model_loading_config", {})
        source = loading.get("model_source")
        if isinstance(source, str):
            loading["model_source"] = resolve_model_source(source, settings, progress)
        out.append(cfg)
    return out


MASKING_CAPS_ENV = "JR2RAY_MASKING_CAPS"


def masking_caps_env(profile_or_path: str | Path) -> dict[str, str]:
    """The env a Run's Harness needs for this profile's masking caps: `{}` when the profile sets none."""
    caps = LLMAppArgs.model_validate(llm_application(profile_or_path).args).masking_caps
    return {MASKING_CAPS_ENV: json.dumps(caps, sort_keys=True)} if caps else {}


def model_ids(args: LLMAppArgs) -> list[str]:
    """The served model names (what clients pass as `model`)."""
    return [str(c["model_loading_config"]["model_id"]) for c in args.llm_configs]
