"""The workflow catalog: the project's workflows/, `jr2ray.workflows` entry points and `--workflows` modules, one
name meaning one workflow, and a clear error (before anything starts) for a catalog that cannot be served."""

from __future__ import annotations

import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from jr2ray.cli import EXIT_USAGE, main
from jr2ray.run import catalog as cat
from jr2ray.run.errors import CatalogError, UnknownWorkflow

FLOW = textwrap.dedent('''
    from pydantic import BaseModel
    from jr2ray import define_event, jr2_setup

    class Door(BaseModel):
        x: int = 0

    class Go(BaseModel):
        pass

    go = define_event(name="go", description="Go.", input=Go)
    machine = jr2_setup(events=[go], actors={}, input=Door).create_machine({
        "id": "%s", "initial": "a",
        "states": {"a": {"invoke": {"src": "gate", "input": {}}, "on": {"go": "b"}}, "b": {"type": "final"}},
    })
''')


@pytest.fixture
def flows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`userflows.solo` (one workflow) and `userflows.pack` (a package of two) on sys.path."""
    root = tmp_path / "userflows"
    (root / "pack").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "solo.py").write_text(FLOW % "solo")
    (root / "pack" / "__init__.py").write_text("")
    (root / "pack" / "alpha.py").write_text(FLOW % "alpha")
    (root / "pack" / "beta.py").write_text(FLOW % "beta")
    (root / "pack" / "_private.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("JR2RAY_WORKFLOWS", raising=False)
    return tmp_path


def test_project_workflows_are_always_there(flows: Path) -> None:
    entries = cat.catalog([])
    assert {"notes", "coder", "deploy"} <= set(entries)
    assert entries["notes"].target == "workflows.notes" and entries["notes"].origin == "workflows/"


def test_a_module_is_one_workflow_and_a_package_one_per_public_module(flows: Path) -> None:
    entries = cat.catalog(["userflows.solo", "userflows.pack"])
    assert entries["solo"].target == "userflows.solo"
    assert (entries["alpha"].target, entries["beta"].target) == ("userflows.pack.alpha", "userflows.pack.beta")
    assert "_private" not in entries
    assert cat.load_workflow("beta", ["userflows.pack"]).id == "beta"
    with pytest.raises(UnknownWorkflow, match="'beta'"):
        cat.load_workflow("beta", [])


def test_jr2ray_workflows_is_the_default_module_list(flows: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JR2RAY_WORKFLOWS", "userflows.solo, userflows.pack")
    assert {"solo", "alpha", "beta", "notes"} <= set(cat.list_workflows())


def test_entry_points_are_found(flows: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ep = EntryPoint(name="solo_ep", value="userflows.solo", group=cat.ENTRY_POINT_GROUP)
    monkeypatch.setattr(cat, "entry_points", lambda group: [ep] if group == cat.ENTRY_POINT_GROUP else [])
    entries = cat.catalog([])
    assert entries["solo_ep"].target == "userflows.solo" and "entry point" in entries["solo_ep"].origin
    assert cat.load_workflow("solo_ep", []).id == "solo"


def test_a_name_two_sources_claim_is_an_error_naming_both(flows: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ep = EntryPoint(name="notes", value="userflows.solo", group=cat.ENTRY_POINT_GROUP)
    monkeypatch.setattr(cat, "entry_points", lambda group: [ep])
    with pytest.raises(CatalogError, match=r"'notes'.*workflows\.notes.*userflows\.solo"):
        cat.catalog([])


@pytest.mark.parametrize(("modules", "match"), [
    (["userflows.nothing_here"], "does not import"),
    (["not a module"], "not a module path"),
])
def test_a_module_that_cannot_be_served_is_an_error(flows: Path, modules: list[str], match: str) -> None:
    with pytest.raises(CatalogError, match=match):
        cat.catalog(modules)


def test_up_refuses_a_bad_workflows_module_before_starting_anything(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    assert main(["--home", str(home), "up", "--workflows", "userflows_missing.mod"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "userflows_missing.mod" in err and "does not import" in err
    assert not (home / "token").exists() and not (home / "instance.json").exists()


def test_up_and_the_api_hand_the_workflows_modules_to_new_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Run actor loads its workflow by name, so it must see the same --workflows modules as the API."""
    import argparse

    from jr2ray.cli.instance import _run_env
    from jr2ray.settings import load_settings
    from serve.api import ApiConfig, ApiContext

    monkeypatch.delenv("JR2RAY_WORKFLOWS", raising=False)
    named = load_settings(local_base_url="http://model.test/v1")  # a model named: `up` leaves it to the runs
    env, llm = _run_env(argparse.Namespace(llm="none", settings=named), ["userflows.solo", "userflows.pack"])
    assert llm is None and env is not None and env["JR2RAY_WORKFLOWS"] == "userflows.solo,userflows.pack"
    assert _run_env(argparse.Namespace(llm="none", settings=named), []) == (None, None)
    ctx = ApiContext(ApiConfig(launcher="none", run_env={"JR2RAY_NOTES_DRIVER": "external"}, workflows=["a.b"]))
    assert ctx.run_env() == {"JR2RAY_NOTES_DRIVER": "external", "JR2RAY_WORKFLOWS": "a.b"}
