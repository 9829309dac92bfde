"""What one API app needs to run, as plain data: it travels to a Serve replica as the deployment's argument."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from jr2ray.run.actor import NAMESPACE
from jr2ray.settings import Settings, load_settings, run_env

MAX_BODY = 1024 * 1024
MAX_RUN_INPUT = 256 * 1024
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
VERSION = "0.1.0"


class ApiConfig(BaseModel):
    """Everything a replica needs. Build it with `from_env` in a deployment, or field by field in a test."""

    home: str | None = Field(default=None, description="JR2RAY_HOME; the instance token is read from <home>/token.")
    store: str | None = Field(default=None, description="The runs' journal store: a directory (default "
                              "<home>/runs) or a postgresql:// URL.")
    token: str | None = Field(default=None, description="The instance token itself (JR2RAY_TOKEN, or a test); "
                              "else it is read from <home>/token.")
    launcher: str | None = Field(default="auto", description="TurnLauncher import path for new runs; 'auto' uses "
                                 "the Harness launcher if it is importable, 'none'/None plays Agents externally.")
    namespace: str = NAMESPACE
    virtual: bool | None = Field(default=None, description="Runs are virtual (hosted only while they work); None: "
                                 "the JR2RAY_VIRTUAL_RUNS setting (on unless set to 0).")
    run_env: dict[str, str] | None = Field(default=None, description="Env for new Run actors (default: this "
                                           "process's JR2RAY_* variables, never the token).")
    ray_address: str | None = Field(default=None, description="Ray to join when none is initialised (outside Serve).")
    workflows: list[str] | None = Field(default=None, description="Workflow modules served beside workflows/ and the "
                                        "jr2ray.workflows entry points (`up --workflows`); None: JR2RAY_WORKFLOWS.")
    poll_s: float = 0.3
    keepalive_s: float = 10.0
    max_body: int = MAX_BODY
    status_timeout_s: float = Field(default=10.0, gt=0, description="How long a status read waits for a Run "
                                    "before answering 503 (a Run restarting must not hang the request).")
    max_input: int = Field(default=MAX_RUN_INPUT, description="Largest run input, in bytes of JSON (413 above).")
    hosts: list[str] = Field(default_factory=lambda: list(LOCAL_HOSTS),
                             description="Names the Host header may carry (DNS-rebinding check); '*' allows any.")

    telemetry: bool = Field(default=True, description="Metrics and JSON logs on (the setting `telemetry`).")
    turn_admission: bool = Field(default=False, description="Turn admission is on for the runs this API starts (the "
                                 "setting `turn_admission`, as `up` resolved it); GET /admission says so.")
    turn_admission_app: str = Field(default=Settings.model_fields["turn_admission_app"].default,
                                    description="The LLM app whose KV budget GET /admission reports (the setting "
                                                "`turn_admission_app`).")

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **overrides: object) -> ApiConfig:
        """The config jr2ray's settings describe (read now if not given); `overrides` (e.g. a serve config's `args`)
        win over them."""
        settings = settings or load_settings()
        token = settings.token.get_secret_value() if settings.token is not None else None
        values: dict[str, object] = {"home": str(settings.home_dir(create=False)), "store": settings.store_setting(),
                                     "launcher": settings.launcher, "token": token or None,
                                     "virtual": settings.virtual_runs,
                                     "ray_address": settings.ray_address, "run_env": run_env(),
                                     "workflows": settings.workflows or None,
                                     "max_input": settings.max_run_input,
                                     "hosts": [*LOCAL_HOSTS, *settings.api_hosts],
                                     "telemetry": settings.telemetry,
                                     "turn_admission": settings.turn_admission,
                                     "turn_admission_app": settings.turn_admission_app}
        values.update(overrides)
        return cls.model_validate(values)

    def home_dir(self) -> Path:
        """`home`: `build_app` fills it from the settings when a config built field by field has none."""
        if not self.home:
            raise ValueError("ApiConfig.home is not set (build_app fills it from the settings)")
        return Path(self.home).expanduser()
