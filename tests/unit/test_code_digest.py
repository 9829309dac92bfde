"""`up` records which jr2ray code it ran, and `connect()` warns a driver whose code differs: a trial once drove an
instance whose hosts were older than its driver, and got "too many positional arguments" and runs woken once an idle
spell, with nothing saying why."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

import jr2ray
from jr2ray.code_digest import code_digest
from jr2ray.run.client import OtherCodeWarning, warn_if_other_code

PACKAGE = Path(jr2ray.__file__).resolve().parent


def test_the_digest_is_of_the_files_and_changes_with_one_byte(tmp_path: Path) -> None:
    copy = tmp_path / "jr2ray"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert code_digest(copy) == code_digest() and len(code_digest()) == 16
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "stale.py").write_text("x = 1\n")  # what a cache holds is not the code
    assert code_digest(copy.resolve()) == code_digest()
    edited = tmp_path / "edited"
    shutil.copytree(copy, edited)
    target = edited / "run" / "host.py"
    target.write_text(target.read_text() + "\n")
    assert code_digest(edited) != code_digest()


def test_a_driver_on_other_code_is_warned_naming_both_and_what_to_do(tmp_path: Path) -> None:
    with pytest.warns(OtherCodeWarning) as got:
        warn_if_other_code("0123456789abcdef", tmp_path)
    text = str(got[0].message)
    assert code_digest() in text and "0123456789abcdef" in text and str(tmp_path) in text
    assert "jr2ray down" in text and "jr2ray up" in text


@pytest.mark.parametrize("recorded", ["same", None, ""])
def test_the_same_code_or_an_instance_from_before_digests_is_not_warned(tmp_path: Path, recorded: str | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_other_code(code_digest() if recorded == "same" else recorded, tmp_path)
