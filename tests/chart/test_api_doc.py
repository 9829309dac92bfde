"""docs/chart-api.md names only what jr2ray.chart has: its import block runs, and each effect it lists exists."""
import re
from pathlib import Path

from jr2ray import chart

DOC = (Path(__file__).resolve().parents[2] / "docs" / "chart-api.md").read_text()


def test_the_documented_import_block_imports():
    block = re.search(r"from jr2ray\.chart import \((.*?)\)", DOC, re.DOTALL)
    assert block is not None
    names = [n.strip() for n in block.group(1).replace("\n", " ").split(",") if n.strip()]
    missing = [n for n in names if not hasattr(chart, n)]
    assert names and missing == []


def test_every_listed_effect_and_record_is_exported_with_those_fields():
    section = DOC.split("## Effects returned by transition", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"`([A-Z][A-Za-z]+)\(([^)]*)\)`", section)
    assert len(found) >= 9
    for name, fields in found:
        cls = getattr(chart, name)
        declared = [f.split(":")[0].strip() for f in fields.split(",") if f.strip()]
        assert all(f in cls.__dataclass_fields__ for f in declared), (name, declared)


def test_the_documented_record_fields_match():
    for name in ("ChildRecord", "TimerRecord"):
        m = re.search(rf"`{name}\(([^)]*)\)`", DOC)
        assert m is not None
        assert [f.strip() for f in m.group(1).split(",")] == list(getattr(chart, name).__dataclass_fields__)


def test_every_snapshot_field_and_method_the_doc_names_exists():
    section = DOC.split("\n## Snapshot\n", 1)[1].split("\n## ", 1)[0]
    fields_part, methods_part = section.split("Methods:", 1)
    methods_part = methods_part.split("`restore(", 1)[0]
    # A field is a lower-case name in backticks not followed by ` =` (those are ChildRecord's own fields).
    fields = re.findall(r"`([a-z_]+)`(?! =)", fields_part)
    methods = re.findall(r"`([a-z_]+)[(`]", methods_part)
    from jr2ray.chart import create_machine, initial_transition

    snap, _ = initial_transition(create_machine({"id": "t", "initial": "a", "states": {"a": {}}}))
    assert len(fields) >= 10 and len(methods) >= 5
    assert [n for n in fields + methods if not hasattr(snap, n)] == []
