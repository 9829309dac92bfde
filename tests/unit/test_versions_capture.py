"""What a Workflow version captures: the module alone. A module importing a sibling module or using a relative
import is refused at capture (it would be pinned in part); one importing only the standard library, `jr2ray` and
installed distributions is captured, named by the sha256 of its source, and its stored source loads the same
machine in a module of its own."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jr2ray.run import versions

FLOW = '''
import json

from pydantic import BaseModel, Field

from jr2ray import define_event, jr2_setup


class Door(BaseModel):
    who: str = Field(description="Who.")


ok = define_event(name="ok", description="Go on.", input=Door)
machine = jr2_setup(events=[ok], actors={}, input=Door).create_machine({
    "id": "solo", "initial": "a",
    "states": {"a": {"invoke": {"src": "gate"}, "on": {"ok": "b"}}, "b": {"type": "final"}},
})
'''


@pytest.fixture
def pkg(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "capflows"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "helpers.py").write_text("X = 1\n")
    (root / "solo.py").write_text(FLOW)
    (root / "sibling.py").write_text("from capflows import helpers\n" + FLOW)
    (root / "relative.py").write_text("from . import helpers\n" + FLOW)
    sys.path.insert(0, str(tmp_path))
    yield root
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("capflows")]:
        del sys.modules[name]


def test_a_module_alone_is_captured_and_loads_from_its_source(pkg: Path) -> None:
    row = versions.capture("solo", "capflows.solo")
    assert row.version == hashlib.sha256(FLOW.encode()).hexdigest() and row.source == FLOW
    machine = versions.exec_version(row)
    assert machine.id == "solo" and machine.digest == versions.exec_version(row).digest
    assert sys.modules[f"jr2ray_versions.solo_{row.version[:16]}"].Door.__name__ == "Door"
    (pkg / "solo.py").write_text(FLOW.replace("Go on.", "Go on, now."))  # a text edit: a new version
    assert versions.capture("solo", "capflows.solo").version != row.version


@pytest.mark.parametrize(("module", "named"), [("capflows.sibling", "capflows"), ("capflows.relative", ".")])
def test_a_module_that_imports_local_code_is_refused(pkg: Path, module: str, named: str) -> None:
    with pytest.raises(versions.VersionUncapturable, match="cannot pin") as err:
        versions.capture("flow", module)
    assert named in str(err.value)


def test_local_imports_names_only_what_a_version_cannot_hold() -> None:
    src = "import os\nimport json, pydantic\nfrom jr2ray import agent\nfrom . import x\nimport not_installed_mod_xyz\n"
    assert versions.local_imports(src) == [".", "not_installed_mod_xyz"]
