"""Every setting jr2ray reads, in one `pydantic-settings` model, so there is one place to look and one way to set them.

Read once where a process starts (`load_settings()`: the CLI's `load`, `connect()`, an actor's constructor after its
env is applied, Serve's factories, a workflow module at import) and passed down from there; no other code calls it
(tests/unit/test_settings_entry_points.py lists the entry points and fails on any other call). Sources, highest
first: explicit overrides (CLI flags), environment variables, the env file named by `--env-file` or
`JR2RAY_ENV_FILE`, the defaults below.
`jr2ray settings` prints each effective value and which of these it came from, with secrets masked.

A model provider declares its own settings in its module (a `ProviderSettings` subclass handed to
`register_provider`); they are read here, with the same sources, and listed as `<kind>.<field>`.

The home directory is resolved here and nowhere else: `Settings.home_dir()`; the journal directory is
`Settings.store_dir()`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from jr2ray.instance_config import CONFIG_FILE, UP_KEYS, InstanceConfig, read_config
from jr2ray.instance_record import Instance, launcher_setting, read_instance

ENV_FILE_VAR = "JR2RAY_ENV_FILE"
DEFAULT_HOME = "~/.jr2ray"
DEFAULT_LOCAL_BASE_URL = "http://127.0.0.1:8000/v1"
DEFAULT_METRICS_PORT = 9393  # Ray's metrics export port of a head `up` starts (Ray's docs use 8080, which clashes)
Driver = Literal["harness", "external"]
TurnPlacement = Literal["affinity", "prefix", "spread", "round_robin"]
"""Turn admission over several LLM replicas: how a conversation is placed (jr2ray.harness.replicas)."""


# ---- provider sections ------------------------------------------------------------------------------------------
class ProviderSettings(BaseModel):
    """One model provider's own settings. A provider subclasses it in its module, one field per setting with its
    variable as the only `validation_alias`, and hands the class to `register_provider(..., settings=...)`; so
    adding a provider adds its settings without an edit here. `load_settings` reads them from the same sources
    as `Settings`; the class itself is plain data, so validating it (a section handed down) reads no variable."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


_SECTIONS: dict[str, type[ProviderSettings]] = {}


def _env_names(model: type[BaseModel]) -> dict[str, str]:
    return {name: str(f.validation_alias.choices[0])  # type: ignore[union-attr]
            for name, f in model.model_fields.items()}


def register_settings_section(kind: str, section: type[ProviderSettings]) -> None:
    """Declare provider `kind`'s settings. A variable another setting already reads, or a second class for the
    same kind, is a mistake, so it raises."""
    held = _SECTIONS.get(kind)
    if held is section:
        return
    if held is not None:
        raise ValueError(f"provider {kind!r} already declares its settings in {held.__name__}")
    taken = {env: owner for owner, env in all_env_names().items()}
    for name, env in _env_names(section).items():
        if env in taken:
            raise ValueError(f"setting {kind}.{name}: variable {env} is already read by setting {taken[env]!r}")
    _SECTIONS[kind] = section


def settings_sections() -> dict[str, type[ProviderSettings]]:
    """The providers' settings sections, by provider kind, in registration order."""
    return dict(_SECTIONS)


@functools.cache
def _reader(section: type[ProviderSettings]) -> type[BaseSettings]:
    """`section` as a `BaseSettings`, which reads the variables of its fields' aliases."""

    class Reader(section, BaseSettings):  # type: ignore[valid-type,misc]
        model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True,
                                          env_file_encoding="utf-8")

    return Reader


def _load_section(section: type[ProviderSettings], env_file: Path | None) -> ProviderSettings:
    """Read a section from the environment and the env file, as `Settings` is read."""
    return section.model_validate(_reader(section)(_env_file=env_file).model_dump())


def all_env_names() -> dict[str, str]:
    """Every setting's variable: `Settings` fields by name, each provider's as `<kind>.<field>`."""
    out = dict(ENV_NAMES)
    for kind, section in _SECTIONS.items():
        out.update({f"{kind}.{name}": env for name, env in _env_names(section).items()})
    return out


class Settings(BaseSettings):
    """jr2ray's configuration. Field names are what code uses; the env variable of each is in `ENV_NAMES`."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True,
                                      env_file_encoding="utf-8")

    home: str = Field(default=DEFAULT_HOME, validation_alias=AliasChoices("JR2RAY_HOME"),
                      description="Instance directory: token, instance.json, runs, models.")
    store: str | None = Field(default=None, validation_alias=AliasChoices("JR2RAY_STORE"),
                              description="The runs' journal store: a directory of SQLite files (default "
                                          "<home>/runs) or a URL such as postgresql://...")
    store_pool_min: int = Field(default=1, ge=0, validation_alias=AliasChoices("JR2RAY_STORE_POOL_MIN"),
                                description="PostgreSQL store: connections each process keeps open (psycopg-pool "
                                            "min_size).")
    store_pool_max: int = Field(default=4, ge=1, validation_alias=AliasChoices("JR2RAY_STORE_POOL_MAX"),
                                description="PostgreSQL store: most connections one process opens (psycopg-pool "
                                            "max_size); the server's max_connections must cover every process.")
    run_placement: Literal["auto", "head", "spread"] = Field(
        default="auto", validation_alias=AliasChoices("JR2RAY_RUN_PLACEMENT"),
        description="Where Run and Harness actors go: auto (any node with CPU on PostgreSQL, the head on SQLite), "
                    "head, or spread (PostgreSQL only).")
    retention_days: float = Field(default=7.0, ge=0, validation_alias=AliasChoices("JR2RAY_RETENTION_DAYS"),
                                  description="Finished runs' journals are purged after this many days.")
    virtual_runs: bool = Field(default=True, validation_alias=AliasChoices("JR2RAY_VIRTUAL_RUNS"),
                               description="Runs are virtual actors, hosted by pooled actors only while they work (the "
                                           "default); 0: one detached actor per run, the old mode and benchmark "
                                           "baseline.")
    idle_deactivate_s: float = Field(default=5.0, ge=0, validation_alias=AliasChoices("JR2RAY_IDLE_DEACTIVATE_S"),
                                     description="A virtual run at Rest with nothing running parks after this idle.")
    queued_idle_s: float = Field(default=0.25, ge=0, validation_alias=AliasChoices("JR2RAY_QUEUED_IDLE_S"),
                                 description="While runs wait for a slot, a live run idle this long after a call "
                                             "parks early (at or above idle_deactivate_s: never early).")
    pool_idle_s: float = Field(default=300.0, ge=0, validation_alias=AliasChoices("JR2RAY_POOL_IDLE_S"),
                               description="With pool_idle_keep set: warm hosts left unused in the pool this long "
                                           "are ended, down to pool_idle_keep.")
    pool_idle_keep: int | None = Field(default=None, ge=0, validation_alias=AliasChoices("JR2RAY_POOL_IDLE_KEEP"),
                                       description="The warm hosts the pool keeps however long they stay unused "
                                                   "(default: all of them, never trimmed). A trimmed host costs a "
                                                   "process start (about 0.5 s of CPU) when a burst of wakes needs "
                                                   "it again, and a driver's handle that still names it gets "
                                                   "RayActorError on its next pick or Gate event.")
    max_live_runs: int | None = Field(default=None, ge=1, validation_alias=AliasChoices("JR2RAY_MAX_LIVE_RUNS"),
                                      description="At most this many virtual runs live at once; more wait `queued` "
                                                  "(default: sized from the node's memory, see live_run_slots).")
    runs_per_host: int = Field(default=1, ge=1, le=64, validation_alias=AliasChoices("JR2RAY_RUNS_PER_HOST"),
                               description="Live runs one pooled host process holds at once (its slots). Each host "
                                           "is a process: more runs a host means fewer, busier processes for the "
                                           "same live-run slots, and each Ray call on them costs less CPU.")
    metrics_port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535,
                              validation_alias=AliasChoices("JR2RAY_METRICS_PORT"),
                              description="Port of Ray's metrics export (Prometheus) on a head `up` starts; 0: a free "
                                          "port. The default, when taken, gives way to a free port (`up` says so).")
    api: str | None = Field(default=None, validation_alias=AliasChoices("JR2RAY_API"),
                            description="API base URL for CLI commands (default: the one `up` recorded).")
    token: SecretStr | None = Field(default=None, validation_alias=AliasChoices("JR2RAY_TOKEN"),
                                    description="Instance token for CLI commands (default: <home>/token).")
    launcher: str = Field(default="auto", validation_alias=AliasChoices("JR2RAY_LAUNCHER"),
                          description="TurnLauncher for new runs: auto, none, or module:attr.")
    workflows: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("JR2RAY_WORKFLOWS"),
        description="Extra workflow modules (comma-separated), beside `workflows/` and the entry points.")
    telemetry: bool = Field(default=True, validation_alias=AliasChoices("JR2RAY_TELEMETRY"),
                            description="Run metrics (Ray's Prometheus export) and the JSON event logs: on (the "
                                        "default) or off (every event is then one check; traces have their own "
                                        "switch, OTEL_EXPORTER_OTLP_ENDPOINT).")
    otel_endpoint: str | None = Field(
        default=None, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="OpenTelemetry's own variable: where runs' traces go (OTLP/HTTP); unset, nothing is traced. "
                    "Read by each process as it starts (jr2ray.run.tracing).")
    otel_service_name: str = Field(default="jr2ray", validation_alias=AliasChoices("OTEL_SERVICE_NAME"),
                                   description="OpenTelemetry's own variable: the service name on every span.")
    local_base_url: str = Field(default=DEFAULT_LOCAL_BASE_URL,
                                validation_alias=AliasChoices("JR2RAY_LOCAL_BASE_URL"),
                                description="OpenAI-compatible server of `local/...` models.")
    local_api_key: SecretStr = Field(default=SecretStr("none"), validation_alias=AliasChoices("JR2RAY_LOCAL_API_KEY"),
                                     description="API key of the OpenAI-compatible server.")
    return_token_ids: bool = Field(default=False, validation_alias=AliasChoices("JR2RAY_RETURN_TOKEN_IDS"),
                                   description="Ask vLLM for prompt token ids (benchmarks).")
    masking_caps: dict[str, int] | None = Field(
        default=None, validation_alias=AliasChoices("JR2RAY_MASKING_CAPS"),
        description="JSON caps masking adds to open strings/arrays/numbers (max_string, max_items, max_digits): "
                    "a random model's profile sets it; unset, decoding follows each schema alone.")
    turn_admission: bool = Field(
        default=False, validation_alias=AliasChoices("JR2RAY_TURN_ADMISSION"),
        description="Turn admission: before a model request, a Turn waits until its conversation fits in the "
                    "LLM app's KV budget (capacity read from vLLM) beside the other live ones: one budget actor per "
                    "app, shared by every run's Harness actors.")
    turn_admission_app: str = Field(
        default="llm", validation_alias=AliasChoices("JR2RAY_TURN_ADMISSION_APP"),
        description="Turn admission: the LLM app (Serve application name) whose KV budget the Harnesses share.")
    turn_admission_release_s: float = Field(
        default=1.0, ge=0, validation_alias=AliasChoices("JR2RAY_TURN_ADMISSION_RELEASE_S"),
        description="Turn admission: a pick or Working tool unanswered this long (a Gate, an Effect) gives the "
                    "conversation's share back until its next request; a continued seat's share lingers this long "
                    "after its Turn ends.")
    turn_admission_growth: int = Field(
        default=512, ge=0, validation_alias=AliasChoices("JR2RAY_TURN_ADMISSION_GROWTH"),
        description="Turn admission: tokens held for a request's answer, beyond its prompt.")
    turn_admission_placement: TurnPlacement = Field(
        default="affinity", validation_alias=AliasChoices("JR2RAY_TURN_ADMISSION_PLACEMENT"),
        description="Turn admission over several LLM replicas (one budget each): where a conversation goes. "
                    "affinity: most room, a replica holding its kind's shared prefix counted one conversation more; "
                    "prefix: where its kind's shared prefix is, while there is room; spread: most room; "
                    "round_robin: each request to the next replica (a baseline: it loses the prefix).")
    turn_admission_patience_s: float = Field(
        default=30.0, gt=0, validation_alias=AliasChoices("JR2RAY_TURN_ADMISSION_PATIENCE_S"),
        description="Turn admission: after this long waiting, a Turn goes before the ones most likely resident.")
    vllm_metrics_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("JR2RAY_VLLM_METRICS_URLS"),
        description="vLLM /metrics URLs (comma-separated) for the bench's cache table and the KV capacity Turn "
                    "admission's budget is sized from; default: found on the Ray nodes.")
    ray_address: str | None = Field(default=None, validation_alias=AliasChoices("RAY_ADDRESS"),
                                    description="Ray cluster to join (default: start a private one).")
    ray_auth_mode: str | None = Field(default=None, validation_alias=AliasChoices("RAY_AUTH_MODE"),
                                      description="Ray's auth mode; a head `up` starts uses token auth.")
    ray_auth_token: SecretStr | None = Field(default=None, validation_alias=AliasChoices("RAY_AUTH_TOKEN"),
                                             description="Ray auth token supplied by the caller.")
    ray_auth_token_path: str | None = Field(default=None, validation_alias=AliasChoices("RAY_AUTH_TOKEN_PATH"),
                                            description="File holding the Ray auth token supplied by the caller.")
    ray_redis_password: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("RAY_REDIS_PASSWORD"),
        description="Password of the Redis a head `up --gcs-redis` starts keeps its GCS state in (Ray's GCS fault "
                    "tolerance); passed to `ray start --redis-password`.")
    notes_model: str = Field(default="local/tiny", validation_alias=AliasChoices("JR2RAY_NOTES_MODEL"),
                             description="Model of the notes workflow's writer.")
    notes_driver: Driver = Field(default="harness", validation_alias=AliasChoices("JR2RAY_NOTES_DRIVER"),
                              description="Who plays the notes writer: harness or external.")
    coder_model: str = Field(default="local/tiny", validation_alias=AliasChoices("JR2RAY_CODER_MODEL"),
                             description="Model of the coder workflow's Agents.")
    coder_driver: Driver = Field(default="harness", validation_alias=AliasChoices("JR2RAY_CODER_DRIVER"),
                              description="Who plays the coder Agents: harness or external.")
    deploy_model: str = Field(default="local/tiny", validation_alias=AliasChoices("JR2RAY_DEPLOY_MODEL"),
                              description="Model of the deploy workflow's operator.")
    http_effect_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("JR2RAY_HTTP_EFFECT_HOSTS"),
        description="Non-public hosts HTTP Effects may reach (comma-separated names, addresses or networks, "
                    "each optionally :port); public hosts are always allowed.")
    max_run_input: int = Field(default=256 * 1024, gt=0, validation_alias=AliasChoices("JR2RAY_MAX_RUN_INPUT"),
                               description="Largest run input the API stores, in bytes of JSON (413 above).")
    api_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("JR2RAY_API_HOSTS"),
        description="Host names the API answers to besides localhost/127.0.0.1/::1 (comma-separated; '*': any).")
    api_request_timeout_s: float = Field(
        default=60.0, gt=0, validation_alias=AliasChoices("JR2RAY_API_REQUEST_TIMEOUT_S"),
        description="How long Serve's proxy waits for the API to answer a request (a pick waiting for Rest included; "
                    "for an event stream, its first byte) before it answers 503 with Retry-After; retrying a pick "
                    "with the same delivery_id is safe.")
    deploy_driver: Driver = Field(default="external", validation_alias=AliasChoices("JR2RAY_DEPLOY_DRIVER"),
                               description="Who plays the deploy operator: harness or external.")

    _sections: dict[str, ProviderSettings] = PrivateAttr(default_factory=dict)
    _env_path: Path | None = PrivateAttr(default=None)

    def section(self, kind: str) -> ProviderSettings:
        """Provider `kind`'s own settings, read with this object's env file. A kind registered after these
        settings were loaded is read on first ask."""
        got = self._sections.get(kind)
        if got is None:
            got = self._sections[kind] = _load_section(settings_sections()[kind], self._env_path)
        return got

    @field_validator("return_token_ids", mode="before")
    @classmethod
    def _empty_is_false(cls, v: Any) -> Any:
        return False if isinstance(v, str) and v.strip() == "" else v

    @field_validator("vllm_metrics_urls", "workflows", "http_effect_hosts", "api_hosts", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [u.strip() for u in v.split(",") if u.strip()]
        return v

    def home_dir(self, create: bool = True) -> Path:
        """The home directory, absolute. The only place jr2ray turns JR2RAY_HOME (or its default) into a path."""
        p = Path(self.home).expanduser().resolve()
        if create:
            p.mkdir(parents=True, exist_ok=True)
        return p

    def store_setting(self) -> str | None:
        """JR2RAY_STORE (or `--store`), else the store the last `up` of this home kept in its config.json (which
        `down` keeps: a plain `up` after `down` serves the same store)."""
        if self.store:
            return self.store
        kept = self.kept_config()
        return kept.store if kept is not None else None

    def kept_config(self) -> InstanceConfig | None:
        """What the last `up` of this home was told (`$JR2RAY_HOME/config.json`), kept across `down`."""
        return read_config(self.home_dir(create=False))

    def catalog_modules(self) -> list[str]:
        """The `--workflows` modules the catalog reads here: JR2RAY_WORKFLOWS (or the env file), then those the last
        `up` of this home kept in config.json, as `up` itself serves them. So `reload`, `workflows`, `migrate`, `gc`
        and `jr2ray.connect()` find the workflows `up --workflows` was given without being told again."""
        kept = self.kept_config()
        extra = kept.workflows if kept is not None and kept.workflows else []
        return [*self.workflows, *(m for m in extra if m not in self.workflows)]

    def store_url(self) -> str | None:
        """The store setting when it is a URL (`scheme://...`, a database), else None. Which backend serves the
        scheme is `jr2ray.run.store`'s business alone."""
        store = self.store_setting()
        return store if store and is_url(store) else None

    def store_location(self, create: bool = True) -> str:
        """What `jr2ray.run.store.open_store` takes: the store's URL, else its directory (made absolute)."""
        return self.store_url() or str(self.store_dir(create))

    def store_dir(self, create: bool = True) -> Path:
        """Where SQLite run journals (and node-local files) live: JR2RAY_STORE if it is a directory, else
        <home>/runs."""
        store = self.store_setting()
        local = store if store and not is_url(store) else None
        p = Path(local).expanduser().resolve() if local else self.home_dir(create) / "runs"
        if create:
            p.mkdir(parents=True, exist_ok=True)
        return p

    def live_run_slots(self) -> int:
        """`max_live_runs`, else a quarter of the node's memory at about 200 MB per live run (its host with an open
        Turn). Each slot also keeps one warm host (about 75 MB) in the pool when the runs park: 30 slots on 24 GB
        keep a node with every run parked under 3 GB."""
        if self.max_live_runs is not None:
            return self.max_live_runs
        import psutil

        return max(4, int(psutil.virtual_memory().total * 0.25 // (200 * 2**20)))

    def instance(self) -> Instance | None:
        """The instance `jr2ray up` recorded in <home>/instance.json, if any (it may since have gone down)."""
        return read_instance(self.home_dir(create=False))

    def instance_token(self) -> str | None:
        """JR2RAY_TOKEN, else the token `up` stored in <home>/token."""
        if self.token is not None and self.token.get_secret_value():
            return self.token.get_secret_value()
        path = self.home_dir(create=False) / "token"
        return path.read_text().strip() if path.exists() else None


def is_url(location: str) -> bool:
    """Is a setting a URL (`scheme://...`) rather than a path? Only its form: no backend is named here."""
    head, sep, _ = location.partition("://")
    return bool(sep and head and "/" not in head)


def without_password(url: str) -> str:
    """A URL fit to print: its password (if any) masked."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:********@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def instance_launcher(settings: Settings) -> str | None:
    """The launcher the instance's `up` started its runs with: "auto", None (`--launcher none`: no Harness, the
    caller plays every Agent seat) or a `module:attr` path. Read from instance.json (the recorded instance's own;
    `down` removes that file), else from config.json (no instance recorded, or one recorded before the field).
    "auto" when neither has one. What `jr2ray.connect()` defaults to, so a driver starts runs as the API does."""
    inst = settings.instance()
    recorded = inst.launcher if inst is not None else None
    if recorded is None:
        kept = settings.kept_config()
        recorded = kept.launcher if kept is not None else None
    if recorded is None:
        return "auto"
    spec = launcher_setting(recorded)
    return None if spec == "none" else spec


ENV_NAMES: dict[str, str] = _env_names(Settings)
SECRETS = frozenset(n for n, f in Settings.model_fields.items() if "SecretStr" in str(f.annotation))


def _secret_names() -> frozenset[str]:
    """SECRETS, and each provider's secret settings as `<kind>.<field>`."""
    return SECRETS | {f"{kind}.{n}" for kind, section in _SECTIONS.items()
                      for n, f in section.model_fields.items() if "SecretStr" in str(f.annotation)}


def _env_file(env_file: str | Path | None) -> Path | None:
    named = env_file or os.environ.get(ENV_FILE_VAR)
    return Path(named).expanduser() if named else None


def load_settings(env_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Read the settings now. `overrides` (field names; None means "not given") win over every other source."""
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(given) - set(Settings.model_fields)
    if unknown:
        raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
    path = _env_file(env_file)
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"settings file {path} does not exist")
    settings = Settings(_env_file=path, **given)
    settings._env_path = path
    settings._sections = {kind: _load_section(section, path) for kind, section in _SECTIONS.items()}
    return settings


_MODULES: dict[tuple[Any, ...], tuple[str, ...]] = {}


def tracing_env() -> tuple[str | None, str]:
    """(`otel_endpoint`, `otel_service_name`) from the process's environment alone: what `jr2ray.run.tracing` reads
    as every process imports it, without building the whole settings (about 5 ms) in every Ray worker."""
    off = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"  # OpenTelemetry's own off switch
    return (None if off else os.environ.get(ENV_NAMES["otel_endpoint"]) or None,
            os.environ.get(ENV_NAMES["otel_service_name"]) or Settings.model_fields["otel_service_name"].default)


def workflow_modules() -> tuple[str, ...]:
    """`load_settings().workflows`, read again only when what it comes from changes: its variable, the env file's
    name, or that file's size and time. The hot paths (every wake of a virtual run looks its workflow up) call
    this: building the whole settings costs about 5 ms of CPU, a third of a wake's."""
    path = _env_file(None)
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return tuple(load_settings().workflows)  # a missing env file: load_settings says so, every time
    key = (os.environ.get(ENV_NAMES["workflows"]), str(path), st and (st.st_mtime_ns, st.st_size, st.st_ino))
    got = _MODULES.get(key)
    if got is None:
        got = tuple(load_settings().workflows)
        if len(_MODULES) >= 64:  # an environment that keeps changing: keep only the newest few
            _MODULES.clear()
        _MODULES[key] = got
    return got


_NOT_INHERITED = ("JR2RAY_TOKEN", "JR2RAY_STORE")  # a run is handed its store by name: its URL may hold a password


def run_env() -> dict[str, str]:
    """The JR2RAY_* variables of this process, but the instance token: what a Run actor started from here inherits,
    so it reads the same settings (its workflow's models and drivers, the model server's URL)."""
    return {k: v for k, v in os.environ.items() if k.startswith("JR2RAY_") and k not in _NOT_INHERITED}


def file_values(env_file: str | Path | None = None) -> dict[str, str | None]:
    """The KEY=value pairs of the env file in use (`env_file`, else $JR2RAY_ENV_FILE), or {} without one."""
    path = _env_file(env_file)
    if path is None or not path.is_file():
        return {}
    from dotenv import dotenv_values

    return dict(dotenv_values(path))


def sources(env_file: str | Path | None = None, flags: dict[str, Any] | None = None) -> dict[str, str]:
    """Where each setting's effective value comes from, in the order `load_settings` applies them."""
    given = {k for k, v in (flags or {}).items() if v is not None}
    path = _env_file(env_file)
    in_file = file_values(path)
    out: dict[str, str] = {}
    for name, env in all_env_names().items():
        if name in given:
            out[name] = "flag"
        elif env in os.environ:
            out[name] = f"environment {env}"
        elif env in in_file:
            out[name] = f"file {path}"
        else:
            out[name] = "default"
    return out


def printable_store(location: str | None) -> str | None:
    """A store setting fit for output and logs: a database URL's password masked, a directory as it is."""
    return without_password(location) if location and is_url(location) else location


def _value(settings: Settings, name: str) -> Any:
    kind, dot, field = name.partition(".")
    return getattr(settings.section(kind), field) if dot else getattr(settings, name)


def masked(settings: Settings, name: str) -> Any:
    """A setting's value for display (a provider's as `<kind>.<field>`): secrets show only whether they are set."""
    value = _value(settings, name)
    if isinstance(value, SecretStr):
        return "********" if value.get_secret_value() else ""
    if name == "store" and isinstance(value, str) and is_url(value):
        return without_password(value)
    return value


def describe(settings: Settings, where: dict[str, str]) -> list[dict[str, Any]]:
    """One row per setting: name, env variable, effective value (secrets masked), source (from `sources()`, taken
    when the settings were read)."""
    secrets = _secret_names()
    rows = [{"name": n, "env": env, "value": masked(settings, n), "source": where.get(n, "default"),
             "secret": n in secrets} for n, env in all_env_names().items()]
    kept = settings.kept_config()
    if kept is None:
        return rows
    where_kept = f"config {settings.home_dir(create=False) / CONFIG_FILE}"
    recorded = settings.store_setting() if settings.store is None else None
    for row in rows:  # a store `up` kept is the effective one: show it (masked) and say where it came from
        if row["name"] == "store" and recorded:
            row["value"] = without_password(recorded) if is_url(recorded) else recorded
            row["source"] = where_kept
        elif row["name"] == "launcher" and kept.launcher is not None and row["source"] == "default":
            row["value"], row["source"] = kept.launcher, where_kept  # what `connect()` and `up` use
        elif row["name"] == "turn_admission" and kept.turn_admission is not None and row["source"] == "default":
            row["value"], row["source"] = kept.turn_admission, where_kept  # what a plain `up` gives its runs
    for key in UP_KEYS:  # what only `up` takes (as flags): shown with the value it keeps
        if key in ("store", "launcher", "turn_admission") or getattr(kept, key) is None:
            continue
        rows.append({"name": key, "env": f"up --{key.replace('_', '-')}", "value": getattr(kept, key),
                     "source": where_kept, "secret": False})
    return rows


__all__ = [
    "DEFAULT_LOCAL_BASE_URL",
    "ENV_FILE_VAR",
    "ENV_NAMES",
    "SECRETS",
    "ProviderSettings",
    "Settings",
    "TurnPlacement",
    "all_env_names",
    "describe",
    "file_values",
    "instance_launcher",
    "is_url",
    "load_settings",
    "masked",
    "printable_store",
    "register_settings_section",
    "run_env",
    "settings_sections",
    "sources",
    "tracing_env",
    "without_password",
]
