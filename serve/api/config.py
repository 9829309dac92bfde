"""What one API app needs to run, as plain data: it travels to a Serve replica as the deployment's argument."""

from __future__ import annotations

import importlib
from pathlib import Path

from pydantic import BaseModel, Field

from jr2ray.run.actor import DEFAULT_LAUNCHER, NAMESPACE
from jr2ray.settings import Settings, load_settings, run_env

MAX_BODY = 1024 * 1024
VERSION = "0.1.0"


class ApiConfig(BaseModel):
    """Everything a replica needs. Build it with `from_env` in a deployment, or field by field in a test."""

    home: str | None = Field(default=None, description="JR2RAY_HOME; the instance token is read from <home>/token.")
    store: str | None = Field(default=None, description="The runs' journal directory (default <home>/runs).")
    token: str | None = Field(default=None, description="The instance token itself (JR2RAY_TOKEN, or a test); "
                              "else it is read from <home>/token.")
    launcher: str | None = Field(default="auto", description="TurnLauncher import path for new runs; 'auto' uses "
                                 "the Harness launcher if it is importable, 'none'/None plays Agents externally.")
    namespace: str = NAMESPACE
    run_env: dict[str, str] | None = Field(default=None, description="Env for new Run actors (default: this "
                                           "process's JR2RAY_* variables, never the token).")
    ray_address: str | None = Field(default=None, description="Ray to join when none is initialised (outside Serve).")
    workflows: list[str] | None = Field(default=None, description="Workflow modules served beside workflows/ and the "
                                        "jr2ray.workflows entry points (`up --workflows`); None: JR2RAY_WORKFLOWS.")
    poll_s: float = 0.3
    keepalive_s: float = 10.0
    max_body: int = MAX_BODY

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **overrides: object) -> ApiConfig:
        """The config jr2ray's settings describe (read now if not given); `overrides` (e.g. a serve config's `args`)
        win over them."""
        settings = settings or load_settings()
        token = settings.token.get_secret_value() if settings.token is not None else None
        values: dict[str, object] = {"home": str(settings.home_dir(create=False)), "store": settings.store,
                                     "launcher": settings.launcher, "token": token or None,
                                     "ray_address": settings.ray_address, "run_env": run_env(),
                                     "workflows": settings.workflows or None}
        values.update(overrides)
        return cls.model_validate(values)

    def home_dir(self) -> Path:
        """`home`, else the settings' home: a config built field by field without one still finds its token."""
        return Path(self.home).expanduser() if self.home else load_settings().home_dir(create=False)


def resolve_launcher(spec: str | None) -> str | None:
    """'auto' → the Harness launcher when its module imports, else None (Agents are then played over the API)."""
    if spec is None or spec.lower() in ("", "none", "external"):
        return None
    if spec == "auto":
        try:
            importlib.import_module(DEFAULT_LAUNCHER.partition(":")[0])
        except ImportError:
            return None
        return DEFAULT_LAUNCHER
    return spec
