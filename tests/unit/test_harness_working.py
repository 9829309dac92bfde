"""Working tools stay inside the Turn's cwd and answer the model's mistakes with text, never an exception."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jr2ray.harness.working import WorkingTools
from jr2ray.menu import texts


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("b")
    return tmp_path


async def test_read_workspace_offers_only_reading(root: Path) -> None:
    tools = WorkingTools("read", root)
    assert tools.names == {"read_file", "list_dir"}
    assert await tools.call("read_file", {"path": "a.txt"}) == "hello"
    assert await tools.call("list_dir", {}) == "a.txt\nsub/"
    assert await tools.call("list_dir", {"path": "sub"}) == "b.txt"
    out = await tools.call("write_file", {"path": "x", "content": "y"})
    assert out.startswith("write_file was not run") and not (root / "x").exists()


async def test_paths_outside_cwd_are_refused(root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret").write_text("s")
    os.symlink(outside / "secret", root / "link")
    tools = WorkingTools("write", root)
    for path in ("../" + outside.name + "/secret", str(outside / "secret"), "link", "sub/../../x"):
        assert await tools.call("read_file", {"path": path}) == texts.outside_workspace(path)
    assert await tools.call("write_file", {"path": "../evil", "content": "x"}) == texts.outside_workspace("../evil")
    assert not (root.parent / "evil").exists()


async def test_read_errors_are_texts(root: Path) -> None:
    tools = WorkingTools("read", root, max_read_chars=3)
    assert await tools.call("read_file", {"path": "nope"}) == texts.not_found("nope")
    assert await tools.call("read_file", {"path": "sub"}) == texts.is_a_directory("sub")
    assert await tools.call("list_dir", {"path": "a.txt"}) == texts.not_a_directory("a.txt")
    assert (await tools.call("read_file", {"path": "a.txt"})).startswith("hel\n[truncated: showing the first 3 of 5")
    assert (await tools.call("read_file", {})).startswith("read_file was not run")


async def test_write_and_run(root: Path) -> None:
    tools = WorkingTools("write", root)
    assert await tools.call("write_file", {"path": "new/c.txt", "content": "abc"}) == texts.wrote_file("new/c.txt", 3)
    assert (root / "new" / "c.txt").read_text() == "abc"
    out = await tools.call("run_command", {"command": "cat new/c.txt; echo err >&2; exit 3"})
    assert out == "exit code: 3\n--- stdout ---\nabc\n--- stderr ---\nerr\n"


async def test_run_command_times_out(root: Path) -> None:
    tools = WorkingTools("write", root)
    out = await tools.call("run_command", {"command": "echo started; sleep 5", "timeout_s": 0.3})
    assert out.startswith("The command was stopped after 0.3 seconds.") and "started" in out
    assert (await tools.call("run_command", {"command": ""})).startswith("run_command was not run")
    assert (await tools.call("run_command", {"command": "true", "timeout_s": -1})).startswith("run_command was not run")
