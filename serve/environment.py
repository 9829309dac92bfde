"""The one place serve/ reads the process environment.

Why one function: a deployment is configured by environment variables (KubeRay's `env_vars`, `ray start` command
lines), and a variable that nothing reads fails silently. With every read here, `ServeEnv` is the whole list of what
serve/ understands, and a test can hold the cluster configs against it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, Field

# The names serve/ reads. JR2RAY_LOCAL_BASE_URL is not read here: serve/ forwards it to Run actors (run_env), where
# the Harness's providers read it.
HOME = "JR2RAY_HOME"
STORE = "JR2RAY_STORE"
LAUNCHER = "JR2RAY_LAUNCHER"
TOKEN = "JR2RAY_TOKEN"
METRICS_URLS = "JR2RAY_VLLM_METRICS_URLS"
RAY_ADDRESS = "RAY_ADDRESS"
RUN_ENV_PREFIX = "JR2RAY_"


class ServeEnv(BaseModel):
    """What serve/ takes from the environment, read once."""

    home: str | None = None
    store: str | None = None
    launcher: str = "auto"
    token: str | None = Field(default=None, description="The instance token (e.g. from a Kubernetes Secret).")
    ray_address: str | None = None
    metrics_urls: list[str] = Field(default_factory=list)
    run_env: dict[str, str] = Field(default_factory=dict, description="JR2RAY_* variables (never the token) that "
                                    "new Run actors inherit: the Harness's model URL and drivers travel this way.")
    expand: dict[str, str] = Field(default_factory=dict, description="The whole environment, for the `${VAR}` "
                                   "references a serve config may put in a model source.")


def read_env(environ: Mapping[str, str] | None = None) -> ServeEnv:
    """Every environment read of serve/ (pass `environ` to read another mapping, e.g. in tests)."""
    env = dict(os.environ if environ is None else environ)
    urls = [u.strip() for u in env.get(METRICS_URLS, "").split(",") if u.strip()]
    return ServeEnv(home=env.get(HOME) or None, store=env.get(STORE) or None, launcher=env.get(LAUNCHER, "auto"),
                    token=env.get(TOKEN) or None, ray_address=env.get(RAY_ADDRESS) or None, metrics_urls=urls,
                    run_env={k: v for k, v in env.items() if k.startswith(RUN_ENV_PREFIX) and k != TOKEN},
                    expand=env)
