"""Effects refuse what the workflow author did not write: a failing exit code, undeclared input keys, a
non-public host, a file outside the run's workspace. Each runs through LocalRun with a real journal; a refused
call is never journaled as started and never touches what it named."""

from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from jr2ray import LocalRun, assign, effect, jr2_setup
from jr2ray.authoring import EffectSpec, WorkflowError
from jr2ray.run.store import Store


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("JR2RAY_HTTP_EFFECT_HOSTS", raising=False)
    return tmp_path / "home"


def machine(spec: EffectSpec, input: Any = None) -> Any:
    """One state that invokes the Effect (with `input`) and keeps its output or its error in context."""
    kept = assign({"got": lambda event: event.output})
    failed = assign({"got": lambda event: event.error})
    invoke: dict[str, Any] = {"src": "fx", "onDone": {"target": "done", "actions": kept},
                              "onError": {"target": "failed", "actions": failed}}
    if input is not None:
        invoke["input"] = input
    return jr2_setup(events=[], actors={"fx": spec}).create_machine({
        "id": "x", "initial": "busy", "context": {"got": None, "target": "a.txt"}, "states": {
            "busy": {"invoke": invoke}, "done": {"type": "final"}, "failed": {"type": "final"}}})


async def run_once(tmp_path: Path, spec: EffectSpec, input: Any = None) -> tuple[LocalRun, list[str]]:
    store = Store(tmp_path / "runs")
    run = LocalRun(machine(spec, input), store=store)
    await run.wait(20)
    journal = store.open(run.id)
    try:
        return run, [e.kind for e in journal.ledger() if e.kind.startswith("effect_")]
    finally:
        journal.close()


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


# -- 6: exit codes ---------------------------------------------------------------------------------------------


async def test_a_non_zero_exit_routes_to_on_error_with_its_output(tmp_path: Path) -> None:
    run, _ = await run_once(tmp_path, effect.command(py("import sys; print('out'); "
                                                        "print('bad', file=sys.stderr); sys.exit(3)")))
    assert run.value == "failed"
    got = run.context["got"]
    assert (got["exit_code"], got["stdout"], got["stderr"]) == (3, "out\n", "bad\n")
    assert "exited 3" in got["message"]


async def test_ok_exit_codes_make_a_listed_code_an_output(tmp_path: Path) -> None:
    run, _ = await run_once(tmp_path, effect.command(py("import sys; sys.exit(1)"), ok_exit_codes=[0, 1]))
    assert run.value == "done" and run.context["got"]["exit_code"] == 1


async def test_the_deploy_example_counts_only_a_successful_deploy(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The deploy command fails (its log's directory does not exist): `deploys` stays 0 and `submit` stays closed."""
    monkeypatch.setenv("JR2RAY_DEPLOY_DRIVER", "external")
    import importlib

    import workflows.deploy

    deploy = importlib.reload(workflows.deploy).machine
    run = LocalRun(deploy, {"log_path": "missing/deploy.log", "deploy_seconds": 0})
    receipt = await run.pick("operator", "deploy", {})
    assert receipt.answer is not None and receipt.answer.startswith("deploy failed: EffectFailed: command exited 1")
    assert run.context["deploys"] == 0
    assert "submit" not in run.surface("operator").allowed
    run.cancel()


async def test_the_deploy_example_refuses_a_log_path_outside_the_workspace(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The run input once named any file the worker could append to."""
    monkeypatch.setenv("JR2RAY_DEPLOY_DRIVER", "external")
    import importlib

    import workflows.deploy

    deploy = importlib.reload(workflows.deploy).machine
    target = tmp_path / "elsewhere.log"
    run = LocalRun(deploy, {"log_path": str(target), "deploy_seconds": 0})
    receipt = await run.pick("operator", "deploy", {})
    assert receipt.answer is not None and "outside the run's workspace" in receipt.answer
    assert not target.exists() and run.context["deploys"] == 0
    run.cancel()


# -- 7: declared parameters ------------------------------------------------------------------------------------


def test_a_literal_input_key_the_effect_does_not_declare_is_refused_at_load() -> None:
    with pytest.raises(WorkflowError, match=r"workflow 'x', state x\.busy: Effect 'fx' input has key\(s\) "
                                            r"\['argv'\]"):
        machine(effect.command(py("print(1)")), {"argv": ["rm", "-rf", "/"]})
    with pytest.raises(WorkflowError, match=r"\['url'\]"):
        machine(effect.http("GET", "https://example.com/", params=["q"]), {"url": "http://127.0.0.1/", "q": 1})


async def test_a_computed_input_key_the_effect_does_not_declare_goes_to_on_error(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run, effects = await run_once(tmp_path, effect.command(py(f"open({str(marker)!r}, 'w')")),
                                  lambda context: {"argv": ["true"], "cwd": "/"})
    assert run.value == "failed"
    assert "['argv', 'cwd'] are not declared parameters" in run.context["got"]["message"]
    assert effects == [] and not marker.exists()


async def test_declared_parameters_reach_the_argument_callables_as_input(tmp_path: Path) -> None:
    spec = effect.command(lambda input: py(f"print({input['n']!r} * 2)"), params=["n"])
    run, _ = await run_once(tmp_path, spec, lambda context: {"n": 21})
    assert run.value == "done" and run.context["got"]["stdout"] == "42\n"


# -- 8: HTTP hosts ---------------------------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []
    redirect_to: ClassVar[str | None] = None

    def do_GET(self) -> None:
        type(self).hits.append(f"{self.server.server_port}{self.path}")  # type: ignore[attr-defined]
        if self.path == "/hop" and type(self).redirect_to:
            self.send_response(302)
            self.send_header("Location", type(self).redirect_to)
            self.end_headers()
            return
        body = b'{"secret": "loopback"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    """Two HTTP servers on loopback; /hop on the first redirects to the second."""
    made = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler) for _ in range(2)]
    for s in made:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    _Handler.hits = []
    a, b = (s.server_address[1] for s in made)
    _Handler.redirect_to = f"http://127.0.0.1:{b}/data"
    yield a, b
    for s in made:
        s.shutdown()
        s.server_close()


async def test_a_loopback_host_is_denied_by_default(tmp_path: Path, servers: tuple[int, int]) -> None:
    a, _ = servers
    run, effects = await run_once(tmp_path, effect.http("GET", f"http://127.0.0.1:{a}/data"))
    assert effects == ["effect_started", "effect_finished"]  # journaled as run, refused at the connect
    assert run.value == "failed" and "non-public address" in run.context["got"]["message"]
    assert _Handler.hits == []


async def test_a_name_is_checked_by_the_address_it_resolves_to(tmp_path: Path, servers: tuple[int, int]) -> None:
    a, _ = servers
    run, _ = await run_once(tmp_path, effect.http("GET", f"http://localhost:{a}/data"))
    assert run.value == "failed" and "'localhost' resolves to" in run.context["got"]["message"]
    assert _Handler.hits == []


async def test_a_listed_loopback_host_is_allowed(tmp_path: Path, servers: tuple[int, int],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = servers
    monkeypatch.setenv("JR2RAY_HTTP_EFFECT_HOSTS", f"127.0.0.1:{a}")
    run, _ = await run_once(tmp_path, effect.http("GET", f"http://127.0.0.1:{a}/data"))
    assert run.value == "done" and run.context["got"] == {"status": 200, "json": {"secret": "loopback"}}


async def test_a_redirect_to_an_unlisted_address_is_denied(tmp_path: Path, servers: tuple[int, int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = servers
    monkeypatch.setenv("JR2RAY_HTTP_EFFECT_HOSTS", f"127.0.0.1:{a}")
    run, _ = await run_once(tmp_path, effect.http("GET", f"http://127.0.0.1:{a}/hop"))
    assert run.value == "failed" and "non-public address" in run.context["got"]["message"]
    assert _Handler.hits == [f"{a}/hop"]  # the second server was never reached
    monkeypatch.setenv("JR2RAY_HTTP_EFFECT_HOSTS", "127.0.0.0/8")
    run, _ = await run_once(tmp_path, effect.http("GET", f"http://127.0.0.1:{a}/hop"))
    assert run.value == "done" and _Handler.hits[-1] == f"{b}/data"


# -- 9: paths --------------------------------------------------------------------------------------------------


async def test_a_file_outside_the_workspace_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    spec = effect.command(py(f"open({str(outside)!r}, 'a').write('x')"), files=[str(outside)])
    run, effects = await run_once(tmp_path, spec)
    assert run.value == "failed" and "outside the run's workspace" in run.context["got"]["message"]
    assert effects == [] and not outside.exists()
    escape = effect.command(py("print(1)"), files=["../../elsewhere"])
    run, _ = await run_once(tmp_path, escape)
    assert run.value == "failed" and "outside the run's workspace" in run.context["got"]["message"]


async def test_relative_files_and_the_default_cwd_are_the_run_workspace(tmp_path: Path, home: Path) -> None:
    spec = effect.command(lambda context: py(f"open({context['target']!r}, 'a').write('x')"),
                          files=lambda context: [context["target"]])
    run, _ = await run_once(tmp_path, spec)
    assert run.value == "done"
    assert (home / "workspaces" / run.id / "a.txt").read_text() == "x"


async def test_an_allowed_path_lets_the_author_name_a_file_outside(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    spec = effect.command(py("print(1)"), cwd=str(shared), files=[str(shared / "log")], allow_paths=[str(shared)])
    run, _ = await run_once(tmp_path, spec)
    assert run.value == "done"
    refused = effect.command(py("print(1)"), cwd="/")
    run, _ = await run_once(tmp_path, refused)
    assert run.value == "failed" and "cwd '/'" in run.context["got"]["message"]
