"""The HTTP API and Console (SPEC §7, §8): FastAPI, deployed as a Ray Serve ingress by `jr2ray up`.

Why it is shaped this way:
- `build_app(config)` makes an app with no global state, so tests run it under uvicorn in-process and Serve builds one
  per replica (`ApiDeployment`, late-bound ingress) from the same config.
- Runs are reached through `jr2ray.run.client.Client` (Ray actors by name). Every actor call is awaited, so a pick that
  waits for Rest holds one request, never the event loop.
- Auth and the body-size limit are ASGI middleware, so a caller without the right token is refused (401/403) before
  its body is even read, and nothing downstream can forget the check.
- Every refusal happens before the first call that could change a run, so a refused request changes nothing.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from jr2ray.authoring import Jr2Machine
from jr2ray.menu import MenuItem, Receipt, Surface
from jr2ray.menu.walk import Seat
from jr2ray.run import list_workflows, load_workflow
from jr2ray.run.actor import DEFAULT_LAUNCHER, NAMESPACE, actor_name
from jr2ray.run.errors import BadRequest, Conflict, RunError, UnknownRun, UnknownTurn, UnknownWorkflow
from jr2ray.run.models import GateView, RunStatus, SendResult, TurnView

from .auth import Principal, authenticate, harness_token, read_token
from .graph import Graph, active_paths, graph_of, render_svg

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 1024 * 1024
CONSOLE_DIR = Path(__file__).resolve().parent / "console"
VERSION = "0.1.0"
# Public without a token: liveness, the Console's own files, and the API's description (no run data in any of them).
PUBLIC_EXACT = frozenset({"/healthz", "/", "/docs", "/docs/oauth2-redirect", "/openapi.json"})
PUBLIC_PREFIX = ("/console/",)
_HARNESS_ROUTE = re.compile(r"^/agents/(?P<iid>[^/]+)/(?P<what>surface|picks)$")
_IID = re.compile(r"^(?P<run>[A-Za-z0-9_-]+)\.t(?P<seq>\d+)$")
_WORKFLOW = re.compile(r"^[A-Za-z0-9_]+$")
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# ---- config ------------------------------------------------------------------------------------------------------
class ApiConfig(BaseModel):
    """Everything a replica needs; plain data, so it travels to a Serve replica as the deployment's argument."""

    home: str | None = Field(default=None, description="JR2RAY_HOME; the instance token is read from <home>/token.")
    store: str | None = Field(default=None, description="The runs' journal directory (default <home>/runs).")
    token: str | None = Field(default=None, description="The instance token itself (tests); else read from home.")
    launcher: str | None = Field(default="auto", description="TurnLauncher import path for new runs; 'auto' uses "
                                 "the Harness launcher if it is importable, 'none'/None plays Agents externally.")
    namespace: str = NAMESPACE
    run_env: dict[str, str] | None = Field(default=None, description="Env for new Run actors (default: this "
                                           "process's JR2RAY_* variables).")
    ray_address: str | None = Field(default=None, description="Ray to join when none is initialised (outside Serve).")
    poll_s: float = 0.3
    keepalive_s: float = 10.0
    max_body: int = MAX_BODY

    @classmethod
    def from_env(cls) -> ApiConfig:
        return cls(home=os.environ.get("JR2RAY_HOME"), store=os.environ.get("JR2RAY_STORE"),
                   launcher=os.environ.get("JR2RAY_LAUNCHER", "auto"), ray_address=os.environ.get("RAY_ADDRESS"))


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


# ---- request and response models ---------------------------------------------------------------------------------
class Strict(BaseModel):
    """Request bodies refuse unknown keys: a typo must not be silently dropped."""

    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    detail: str


class ConflictBody(BaseModel):
    detail: str
    accepts_now: list[str]


class Health(BaseModel):
    ok: bool
    version: str


class WorkflowSummary(BaseModel):
    name: str
    id: str
    digest: str
    agents: list[str]
    seats: list[Seat]
    warnings: list[str]


class WorkflowDetail(WorkflowSummary):
    seats_text: str
    door_schema: dict[str, Any] | None = Field(description="The run input's JSON schema (the door).")
    menus: dict[str, list[MenuItem]] = Field(description="The fixed Menu of each Agent slot.")
    graph: Graph


class StartRun(Strict):
    input: dict[str, Any] = Field(description="The run's input; it must pass the workflow's door schema.")


class RunView(RunStatus):
    """A run's status plus the state paths its value holds (what the Console lights)."""

    active: list[str] = Field(default_factory=list)
    live: bool = Field(default=True, description="False when read from the journal (no Run actor is up).")


class RunSummary(BaseModel):
    id: str
    workflow: str
    digest: str
    status: str
    created_at: float
    updated_at: float
    input: Any = None
    value: Any = None
    active: list[str] = Field(default_factory=list)
    gates: list[GateView] = Field(default_factory=list)
    turns: list[TurnView] = Field(default_factory=list)


class GateEvent(Strict):
    event: str = Field(description="The event to send through the Gate, e.g. 'reply'.")
    input: dict[str, Any] = Field(default_factory=dict, description="The event's payload (its JSON schema).")
    delivery_id: str | None = Field(default=None, description="Idempotency key: a repeat returns the first result.")


class GateEventResult(SendResult):
    active: list[str] = Field(default_factory=list)


class HarnessToken(BaseModel):
    """A scoped token good for one Turn's surface and picks only."""

    iid: str
    token: str


class Pick(Strict):
    name: str = Field(description="The Menu event the Agent picks (its tool name).")
    args: dict[str, Any] = Field(default_factory=dict)
    delivery_id: str | None = None


class TurnCache(BaseModel):
    """Cache reuse of one Turn: the Console's cache chart plots cached against prefilled tokens."""

    iid: str
    slot: str
    state: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    prefilled_tokens: int


class Telemetry(BaseModel):
    rows: list[dict[str, Any]]
    turns: list[TurnCache]


# ---- helpers -------------------------------------------------------------------------------------------------
class _NotLive(Exception):
    """The run has a journal but no Run actor: readable, not drivable."""


def _run_id_of_iid(iid: str) -> str:
    m = _IID.match(iid)
    if not m:
        raise UnknownTurn(f"no Agent {iid!r} (an Agent id looks like <run id>.t<seq>)")
    return m.group("run")


def _cause(exc: BaseException) -> BaseException:
    """The RunError inside Ray's wrapper, so its status code (and Conflict's accepts_now) survive."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _summarise_telemetry(rows: list[dict[str, Any]]) -> list[TurnCache]:
    turns: dict[str, TurnCache] = {}
    for r in rows:
        iid = str(r.get("iid", "?"))
        t = turns.get(iid)
        if t is None:
            t = turns[iid] = TurnCache(iid=iid, slot=str(r.get("slot", "")), state=str(r.get("state", "")),
                                       requests=0, prompt_tokens=0, cached_tokens=0, prefilled_tokens=0)
        prompt, cached = int(r.get("prompt_tokens") or 0), int(r.get("cached_tokens") or 0)
        t.requests += 1
        t.prompt_tokens += prompt
        t.cached_tokens += cached
        t.prefilled_tokens += max(0, prompt - cached)
    return list(turns.values())


def _sse(kind: str, data: Any, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    body = json.dumps(data, default=str, separators=(",", ":"))
    return f"{head}event: {kind}\ndata: {body}\n\n".encode()


def _json_for_script(data: Any) -> str:
    """JSON safe inside <script>: no `</script>` or `<!--` can end the element early."""
    return json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class ApiContext:
    """Per-app state: config, the instance token, the Ray client and loaded workflows (all lazy)."""

    def __init__(self, config: ApiConfig) -> None:
        self.config = config
        self._client: Any = None
        self._machines: dict[str, Jr2Machine] = {}
        self.launcher = resolve_launcher(config.launcher)

    @property
    def home(self) -> Path:
        return Path(self.config.home or os.environ.get("JR2RAY_HOME") or Path.home() / ".jr2ray").expanduser()

    def token(self) -> str | None:
        return self.config.token or read_token(self.home)

    def run_env(self) -> dict[str, str]:
        if self.config.run_env is not None:
            return dict(self.config.run_env)
        return {k: v for k, v in os.environ.items() if k.startswith("JR2RAY_") and k != "JR2RAY_TOKEN"}

    def client(self) -> Any:
        if self._client is None:
            import ray

            from jr2ray.run.client import Client, _init_ray

            if not ray.is_initialized():
                _init_ray(self.config.ray_address, self.config.namespace)
            store = self.config.store or str(self.home / "runs")
            self._client = Client(self.config.namespace, store, self.launcher)
        return self._client

    def machine(self, name: str) -> Jr2Machine:
        """Only names `list_workflows()` offers: a request must never import an arbitrary module."""
        if name not in self._machines:
            if not _WORKFLOW.match(name) or name not in list_workflows():
                raise UnknownWorkflow(f"no workflow {name!r}")
            self._machines[name] = load_workflow(name)
        return self._machines[name]

    def workflows(self) -> list[tuple[str, Jr2Machine]]:
        return [(n, self.machine(n)) for n in list_workflows()]

    async def actor(self, run_id: str) -> Any:
        """The live Run actor of exactly this id; UnknownRun when there is none, _NotLive for a journal only."""
        if not _RUN_ID.match(run_id):
            raise UnknownRun(f"no run {run_id!r}")
        client = self.client()
        import ray

        try:
            return await asyncio.to_thread(ray.get_actor, actor_name(run_id), namespace=self.config.namespace)
        except ValueError:
            if await asyncio.to_thread(client.store.exists, run_id):
                raise _NotLive(run_id) from None
            raise UnknownRun(f"no run {run_id!r}") from None

    async def call(self, ref: Any) -> Any:
        """Await an actor call; a RunError raised inside the actor comes back as itself."""
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return await ref
        except RayTaskError as exc:
            cause = _cause(exc)
            if isinstance(cause, RunError):
                raise cause from None
            raise
        except RayActorError as exc:
            raise RunUnavailable(f"the Run actor is not answering ({type(exc).__name__}); retry shortly") from None

    def journal_view(self, run_id: str) -> RunView:
        """A run with no live actor, read from its journal."""
        j = self.client().store.open(run_id)
        try:
            row = j.run()
            latest = j.latest_snapshot()
        finally:
            j.close()
        if row is None:
            raise UnknownRun(f"no run {run_id!r}")
        snap = latest[1] if latest else {}
        machine_id = snap.get("machine") or self._machine_id(row.workflow)
        return RunView(id=row.id, workflow=row.workflow, digest=row.digest, status=row.status,
                       value=snap.get("value"), context=snap.get("context") or {}, output=snap.get("output"),
                       error=snap.get("error"), active=active_paths(machine_id, snap.get("value")) if snap else [],
                       live=False)

    def view(self, status: RunStatus) -> RunView:
        machine_id = self._machine_id(status.workflow)
        return RunView(**status.model_dump(), active=active_paths(machine_id, status.value))

    def _machine_id(self, workflow: str) -> str:
        try:
            return self.machine(workflow).id
        except RunError:
            return workflow


class RunUnavailable(RunError):
    """The Run actor died and Ray is restarting it (R5): try again."""

    status_code = 503


class Forbidden(RunError):
    status_code = 403


# ---- middleware --------------------------------------------------------------------------------------------------
def _is_public(method: str, path: str) -> bool:
    return method in ("GET", "HEAD") and (path in PUBLIC_EXACT or path.startswith(PUBLIC_PREFIX))


async def _reply(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
                 ) -> None:
    raw = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": raw})


class AuthMiddleware:
    """401 without a valid Bearer token; 403 for a Harness token anywhere but its own Turn's surface and picks."""

    def __init__(self, app: ASGIApp, ctx: ApiContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if _is_public(method, path):
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        token = self.ctx.token()
        principal = authenticate(header, token) if token else None
        if principal is None:
            detail = ("this jr2ray instance has no token yet: run `jr2ray up`" if not token else
                      "missing or invalid token: send 'Authorization: Bearer <token>'")
            await _reply(send, 401, {"detail": detail}, [(b"www-authenticate", b"Bearer")])
            return
        if principal.kind == "harness":
            m = _HARNESS_ROUTE.match(path)
            allowed = (m is not None and m.group("iid") == principal.iid and
                       (method, m.group("what")) in (("GET", "surface"), ("POST", "picks")))
            if not allowed:
                await _reply(send, 403, {"detail": f"a Harness token may only read the surface of and pick for "
                                                   f"its own Turn {principal.iid}"})
                return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a body over the limit, whether it declares its length or streams it chunked."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        too_big = {"detail": f"request body over {self.limit} bytes"}
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _reply(send, 413, too_big)
            return
        chunks: list[bytes] = []
        size = 0
        while True:  # read it all first (at most limit + one chunk), so nothing acts on a body we then refuse
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await _reply(send, 413, too_big)
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# ---- the app ---------------------------------------------------------------------------------------------------
def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        if e.get("type") == "json_invalid":
            ctx = e.get("ctx", {}) or {}
            where = f" (at character {loc[-1]})" if loc and loc[-1].isdigit() else ""
            return f"malformed JSON body: {ctx.get('error', e.get('msg'))}{where}"
        if e.get("type") == "extra_forbidden" and loc and loc[-1] == "sender":
            return "'sender' is written by jr2ray; a body may not carry it"
        if not loc and e.get("type") == "missing":
            return "a JSON object body is required"
        if e.get("type") == "model_attributes_type" or (not loc and e.get("type") == "dict_type"):
            raw = e.get("input")
            if isinstance(raw, (bytes, str)):  # sent without a JSON content type: say what is wrong with it
                try:
                    json.loads(raw)
                except ValueError as err:
                    return f"malformed JSON body: {err}"
                return "send the body as JSON (Content-Type: application/json)"
            return "the body must be a JSON object"
        parts.append(f"{'.'.join(loc) or 'body'}: {e.get('msg')}")
    return "invalid request: " + "; ".join(parts)


def _no_sender(payload: dict[str, Any], where: str) -> None:
    if "sender" in payload:
        raise BadRequest(f"'sender' is written by jr2ray; {where} may not carry it")


def build_app(config: ApiConfig | None = None) -> FastAPI:
    """One API app. `config` defaults to the environment (JR2RAY_HOME, JR2RAY_STORE, JR2RAY_LAUNCHER)."""
    ctx = ApiContext(config or ApiConfig.from_env())
    errors: dict[int | str, dict[str, Any]] = {401: {"model": ErrorBody, "description": "No or bad token"},
                                               403: {"model": ErrorBody, "description": "Token not scoped for this"},
                                               413: {"model": ErrorBody, "description": "Body over 1 MiB"}}
    app = FastAPI(title="jr2ray", version=VERSION, responses=errors,
                  description="Runs of statechart workflows on Ray. Send `Authorization: Bearer <token>` (printed "
                              "by `jr2ray up`, stored in $JR2RAY_HOME/token).")
    app.state.ctx = ctx
    not_found: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody}}
    bad: dict[int | str, dict[str, Any]] = {400: {"model": ErrorBody}}

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_detail(exc)}, status_code=400)

    @app.exception_handler(RunError)
    async def _on_run_error(_: Request, exc: RunError) -> JSONResponse:
        body: dict[str, Any] = {"detail": str(exc)}
        if isinstance(exc, Conflict):
            body["accepts_now"] = list(exc.accepts_now)
        return JSONResponse(body, status_code=exc.status_code)

    @app.exception_handler(_NotLive)
    async def _on_not_live(request: Request, exc: _NotLive) -> JSONResponse:
        body: dict[str, Any] = {"detail": f"run {exc} has no live Run actor (its journal is readable at "
                                          f"GET /runs/{exc})"}
        if "/gates/" in request.url.path:  # a Gate's 409 always says what it accepts now: nothing
            body["accepts_now"] = []
        return JSONResponse(body, status_code=409)

    # ---- health, workflows ----
    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        """Liveness, for load balancers and `jr2ray up`; needs no token and touches no run."""
        return Health(ok=True, version=VERSION)

    def summary(name: str, m: Jr2Machine) -> WorkflowSummary:
        return WorkflowSummary(name=name, id=m.id, digest=m.digest, agents=m.agent_slots,
                               seats=m.seats(), warnings=list(m.warnings))  # type: ignore[attr-defined]

    @app.get("/workflows", response_model=list[WorkflowSummary], tags=["workflows"])
    async def workflows() -> list[WorkflowSummary]:
        """Every workflow with its seats and load warnings."""
        return [summary(n, m) for n, m in ctx.workflows()]

    @app.get("/workflows/{name}", response_model=WorkflowDetail, responses=not_found, tags=["workflows"])
    async def workflow(name: str) -> WorkflowDetail:
        """Seats, warnings, the door schema, each Agent's Menu and the chart's graph."""
        m = ctx.machine(name)
        return WorkflowDetail(**summary(name, m).model_dump(), seats_text=m.seats_text(),  # type: ignore[attr-defined]
                              door_schema=m.input_model.model_json_schema() if m.input_model else None,
                              menus={s: m.menu(s) for s in m.agent_slots},  # type: ignore[attr-defined]
                              graph=graph_of(m))

    @app.get("/workflows/{name}/graph.svg", responses=not_found, tags=["workflows"],
             response_class=Response)
    async def workflow_svg(name: str) -> Response:
        """The chart drawn server-side; the Console lights states by their data-path."""
        return Response(render_svg(ctx.machine(name), name), media_type="image/svg+xml")

    @app.post("/workflows/{name}/runs", status_code=201, response_model=RunView, responses={**not_found, **bad},
              tags=["runs"])
    async def start_run(name: str, body: StartRun, response: Response) -> RunView:
        """Start a run: its input is checked against the door schema first (400 names the error)."""
        m = ctx.machine(name)
        try:
            m.validate_input(body.input)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        client = ctx.client()
        handle = await asyncio.to_thread(functools.partial(client.start, name, body.input, env=ctx.run_env()))
        status = await ctx.call(handle.actor.status.remote())
        response.headers["location"] = f"/runs/{handle.id}"
        return ctx.view(status)

    # ---- runs ----
    async def live_or_journal(run_id: str) -> RunView:
        try:
            actor = await ctx.actor(run_id)
        except _NotLive:
            return await asyncio.to_thread(ctx.journal_view, run_id)
        try:
            return ctx.view(await ctx.call(actor.status.remote()))
        except RunUnavailable:
            return await asyncio.to_thread(ctx.journal_view, run_id)

    @app.get("/runs", response_model=list[RunSummary], tags=["runs"])
    async def runs(limit: int = Query(200, ge=1, le=1000, description="At most this many runs.")
                   ) -> list[RunSummary]:
        """Runs, newest first: status and value; live ones also their open Gates and Turns."""
        rows = await asyncio.to_thread(ctx.client().runs)
        rows = sorted(rows, key=lambda r: r["created_at"], reverse=True)[:limit]

        async def one(row: dict[str, Any]) -> RunSummary:
            view: RunView | None = None
            try:
                view = await asyncio.wait_for(live_or_journal(row["id"]), timeout=5)
            except (TimeoutError, RunError):
                view = None
            return RunSummary(id=row["id"], workflow=row["workflow"], digest=row["digest"],
                              status=view.status if view else row["status"], created_at=row["created_at"],
                              updated_at=row["updated_at"], input=row["input"],
                              value=view.value if view else None, active=view.active if view else [],
                              gates=view.gates if view else [], turns=view.turns if view else [])

        return list(await asyncio.gather(*(one(r) for r in rows)))

    @app.get("/runs/{run_id}", response_model=RunView, responses=not_found, tags=["runs"])
    async def run(run_id: str) -> RunView:
        """Status, value, context, and the open Gates with `accepts` and `accepts_now`."""
        return await live_or_journal(run_id)

    @app.post("/runs/{run_id}/gates/{gate:path}/events", response_model=GateEventResult,
              responses={**not_found, **bad, 409: {"model": ConflictBody}}, tags=["gates"])
    async def gate_event(run_id: str, gate: str, body: GateEvent) -> GateEventResult:
        """A person's (or webhook's) event through an open Gate. 409 carries what the Gate accepts now."""
        _no_sender(body.input, "an event's input")
        actor = await ctx.actor(run_id)
        res: SendResult = await ctx.call(actor.send.remote(gate, body.event, body.input, body.delivery_id))
        return GateEventResult(**res.model_dump(), active=active_paths(await _mid(actor), res.value))

    async def _mid(actor: Any) -> str:
        status: RunStatus = await ctx.call(actor.status.remote())
        return ctx._machine_id(status.workflow)

    @app.post("/runs/{run_id}/cancel", response_model=RunView, responses=not_found, tags=["runs"])
    async def cancel(run_id: str) -> RunView:
        """End the run as `cancelled` and abort its Turns; a run already over is returned unchanged."""
        actor = await ctx.actor(run_id)
        return ctx.view(await ctx.call(actor.cancel.remote()))

    @app.get("/runs/{run_id}/telemetry", response_model=Telemetry, responses=not_found, tags=["runs"])
    async def telemetry(run_id: str) -> Telemetry:
        """Per-request model telemetry, and per Turn the cached against the prefilled prompt tokens."""
        try:
            actor = await ctx.actor(run_id)
            rows: list[dict[str, Any]] = await ctx.call(actor.telemetry.remote())
        except _NotLive:
            rows = await asyncio.to_thread(_journal_telemetry, ctx, run_id)
        return Telemetry(rows=rows, turns=_summarise_telemetry(rows))

    sse_doc: dict[int | str, dict[str, Any]] = {
        200: {"description": "A `text/event-stream` of `status`, `turn`, `pick`, `receipt`, `admission`, `gate`, "
                             "`telemetry` and a final `end` event, with `: keep-alive` comments (and `gap` when "
                             "events were trimmed before they could be sent).",
              "content": {"text/event-stream": {"schema": {"type": "string"}}}},
        **not_found}

    @app.get("/runs/{run_id}/events", responses=sse_doc, tags=["runs"], response_class=StreamingResponse)
    async def events(run_id: str, request: Request,
                     since: int = Query(0, ge=0, description="Replay history from this event number (an SSE id; "
                                                         "Last-Event-ID wins when sent).")
                     ) -> StreamingResponse:
        """Server-Sent Events: status, picks and receipts, admissions, Gates, Turns and telemetry, live.

        Replays the run's history from `since` (or Last-Event-ID), then follows it; ends when the run ends.
        """
        last = request.headers.get("last-event-id")
        start = int(last) if last and last.isdigit() else max(0, since)
        try:
            actor = await ctx.actor(run_id)
        except _NotLive:
            view = await asyncio.to_thread(ctx.journal_view, run_id)

            async def once() -> AsyncIterator[bytes]:
                yield _sse("status", view.model_dump(mode="json"))
                yield _sse("end", {"status": view.status})

            return StreamingResponse(once(), media_type="text/event-stream")
        first = ctx.view(await ctx.call(actor.status.remote()))
        return StreamingResponse(_feed(ctx, actor, request, start, first), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    # ---- agents ----
    def _check_iid(request: Request, iid: str) -> str:
        principal: Principal | None = request.scope.get("state", {}).get("principal")
        if principal is not None and principal.kind == "harness" and principal.iid != iid:  # belt and braces
            raise Forbidden(f"a Harness token may only act for its own Turn {principal.iid}")
        return _run_id_of_iid(iid)

    @app.get("/agents/{iid}/surface", response_model=Surface, responses=not_found, tags=["agents"])
    async def surface(iid: str, request: Request) -> Surface:
        """The Turn's fixed Menu and its Allowed picks now; `turn_over` once the Turn has ended."""
        run_id = _check_iid(request, iid)
        try:
            actor = await ctx.actor(run_id)
        except UnknownRun:
            raise UnknownTurn(f"no Agent {iid!r}") from None
        surface: Surface = await ctx.call(actor.surface.remote(iid))
        return surface

    @app.post("/agents/{iid}/token", response_model=HarnessToken, responses=not_found, tags=["agents"])
    async def agent_token(iid: str, request: Request) -> HarnessToken:
        """Mint the scoped token for one Turn, to hand to the Harness that plays it (instance token only).

        With it the Harness may read that Turn's surface and pick for it, nothing else: no other Turn, no run, and
        never a Gate. A Harness token asking here gets 403 from the middleware.
        """
        run_id = _check_iid(request, iid)
        try:
            actor = await ctx.actor(run_id)
        except UnknownRun:
            raise UnknownTurn(f"no Agent {iid!r}") from None
        status: RunStatus = await ctx.call(actor.status.remote())  # read-only: surface() would consume notices
        if not any(t.iid == iid and t.active for t in status.turns):
            raise UnknownTurn(f"no live Turn {iid!r} in run {run_id}")
        token = ctx.token()
        assert token is not None  # the middleware let an instance token through
        return HarnessToken(iid=iid, token=harness_token(token, iid))

    @app.post("/agents/{iid}/picks", response_model=Receipt, responses={**not_found, **bad}, tags=["agents"])
    async def pick(iid: str, body: Pick, request: Request) -> Receipt:
        """One pick, answered by its receipt; a pick that starts work is answered when the Agent is at Rest."""
        run_id = _check_iid(request, iid)
        _no_sender(body.args, "a pick's args")
        try:
            actor = await ctx.actor(run_id)
        except UnknownRun:
            raise UnknownTurn(f"no Agent {iid!r}") from None
        receipt: Receipt = await ctx.call(actor.pick.remote(iid, body.name, body.args, body.delivery_id))
        return receipt

    # ---- the Console ----
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def console() -> HTMLResponse:
        """The Console page, with the workflows' seats and graphs inlined (no run data: it is public)."""
        catalogue = [{**summary(n, m).model_dump(mode="json"), "svg": render_svg(m, n)} for n, m in ctx.workflows()]
        page = (CONSOLE_DIR / "index.html").read_text()
        page = page.replace("/*CATALOGUE*/null", _json_for_script(catalogue))
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    app.mount("/console", StaticFiles(directory=CONSOLE_DIR), name="console")
    app.add_middleware(BodyLimitMiddleware, limit=ctx.config.max_body)
    app.add_middleware(AuthMiddleware, ctx=ctx)  # added last: runs first
    _add_bearer_scheme(app)
    return app


def _journal_telemetry(ctx: ApiContext, run_id: str) -> list[dict[str, Any]]:
    j = ctx.client().store.open(run_id)
    try:
        return [e.data for e in j.ledger("telemetry")]
    finally:
        j.close()


def _add_bearer_scheme(app: FastAPI) -> None:
    """Describe the Bearer token in OpenAPI so /docs offers an Authorize button (auth itself is middleware)."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original()
        schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
            "type": "http", "scheme": "bearer"}
        schema["security"] = [{"bearer": []}]
        for path in ("/healthz",):
            for op in schema.get("paths", {}).get(path, {}).values():
                op["security"] = []
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


async def _feed(ctx: ApiContext, actor: Any, request: Request, since: int, first: RunView) -> AsyncIterator[bytes]:
    """The SSE body: the run's history from `since`, a status whenever it changes, keep-alives, then `end`.

    Each history event's SSE id is its number + 1, so a reconnect with Last-Event-ID resumes right after it.
    """
    cfg = ctx.config
    yield b"retry: 2000\n\n"
    yield _sse("status", first.model_dump(mode="json"))
    last_sig = _signature(first)
    last_write = last_status = time.monotonic()
    status = first

    async def drain() -> AsyncIterator[bytes]:
        nonlocal since
        items: list[dict[str, Any]] = await ctx.call(actor.history.remote(since))
        for item in items:
            seq = int(item.get("seq", since))
            if seq > since:  # the Run trimmed these before we read them: say so rather than skip silently
                yield _sse("gap", {"missed": seq - since, "from": since + 1, "to": seq})
            since = seq + 1
            if item["kind"] == "status":  # the engine's end note: the full status event says it, with the value
                continue
            yield _sse(item["kind"], dict(item["data"], at=item["at"]), since)

    while True:
        if await request.is_disconnected():
            return
        wrote = False
        try:
            async for chunk in drain():
                wrote = True
                yield chunk
        except RunError:
            yield _sse("end", {"status": "unavailable"})
            return
        if wrote:
            last_write = time.monotonic()
        now = time.monotonic()
        if wrote or now - last_status > 1.0:
            last_status = now
            try:
                status = ctx.view(await ctx.call(actor.status.remote()))
            except RunError:
                yield _sse("end", {"status": "unavailable"})
                return
            sig = _signature(status)
            if sig != last_sig:
                last_sig = sig
                yield _sse("status", status.model_dump(mode="json"))
                last_write = time.monotonic()
        if status.status != "active":
            try:
                async for chunk in drain():
                    yield chunk
            except RunError:
                pass
            yield _sse("end", {"status": status.status})
            return
        if time.monotonic() - last_write >= cfg.keepalive_s:
            yield b": keep-alive\n\n"
            last_write = time.monotonic()
        await asyncio.sleep(cfg.poll_s)


def _signature(v: RunView) -> str:
    return json.dumps([v.status, v.value, v.context, [(g.id, g.accepts_now) for g in v.gates],
                       [(t.iid, t.active, t.outstanding) for t in v.turns]], sort_keys=True, default=str)


# ---- Ray Serve ---------------------------------------------------------------------------------------------------
APP_NAME = "jr2ray"


def _make_deployment() -> Any:
    from ray import serve

    @serve.deployment(name="jr2ray-api", num_replicas=1, ray_actor_options={"num_cpus": 0},
                      max_ongoing_requests=1000)
    @serve.ingress()
    class ApiDeployment:
        """The API as a Serve ingress: each replica builds its own app from the config it is given."""

        def __init__(self, config: dict[str, Any]) -> None:
            self.config = ApiConfig.model_validate(config)

        def __serve_build_asgi_app__(self) -> FastAPI:
            return build_app(self.config)

    return ApiDeployment


try:  # module-level for `serve run serve.api:...`-style use; absent Serve only disables deployment
    ApiDeployment: Any = _make_deployment()
except ImportError:  # pragma: no cover - Ray Serve is an optional extra
    ApiDeployment = None


def deploy_api(config: ApiConfig, host: str = "127.0.0.1", port: int = 8000, name: str = APP_NAME) -> str:
    """Start Serve's HTTP proxy (if needed) and deploy the API at `/` on the initialised Ray; returns its URL."""
    from ray import serve

    from serve.llm import serve_http_port

    if ApiDeployment is None:
        raise RuntimeError("Ray Serve is not installed (pip install 'jr2ray[ray]')")
    serve.start(http_options={"host": host, "port": port})
    port = serve_http_port(default=port)  # a Serve already running keeps its own port: report the real one
    serve.run(ApiDeployment.bind(config.model_dump()), name=name, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"


app = build_app()
