"""Every rule id cited in the repository is one docs/rules.md defines, and nothing cites a document a clone lacks.

Comments, docstrings and test names cite rules by id (D3, M9.2, `test_d3_...`). This test reads the ids that
docs/rules.md defines (one per heading or table row), scans the prose of every file of the repository (git's list:
code, tests, docs, CI scripts, cluster files) for ids and for citations of documents that are not in the
repository, and fails naming file:line for each one it cannot resolve.

What counts as prose, so that state names in test charts ("A1", "B2") and SVG paths ("M0,0 L10,5") are left alone:
- Python: comments, docstrings, and the names of functions and classes (a test name cites `d3` as `_d3_`);
- Markdown: every line;
- YAML, TOML, shell (a `#!` script without a suffix too), Dockerfile, .env files: `#` comments; JavaScript and
  CSS: `//` and `/* */` comments; HTML: `<!-- -->` comments; data (JSON, images) is not read.
Citations of outside documents are looked for in the whole text of every file, string literals included.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "rules.md"
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".ini", ".js", ".css", ".html", ".jinja", ".txt"}
#: Other text files, read as the kind whose comments they share: `#` like a shell script, `//` like JavaScript.
ALIASES = {".mjs": ".js", ".example": ".sh", ".env": ".sh", ".gitignore": ".sh", "Dockerfile": ".sh"}
#: Measured results (benchmarks/results) are data, not prose; the rest is every file of the repository.
SKIP_DIRS = {"__pycache__", ".git", "node_modules", "results", ".venv", ".mypy_cache", ".ruff_cache"}

#: The rule families docs/rules.md defines. An id is a family letter, a number from 1 to 99 (never 0: "M0,0" is an
#: SVG path), and an optional part number (M9.2).
FAMILIES = "ACDHKLMQRSVW"
_NUM = r"[1-9][0-9]?"
_ID = rf"[{FAMILIES}]{_NUM}(?:\.{_NUM})?"
#: In prose: a whole word, not glued to a neighbour ("H100", "0xA1", "#C1C1C1", "v2.D1" are not rule ids), and not
#: a coordinate ("M10,5"). A hardware name written with its maker or "GPU" next to it is not one either.
PROSE_ID = re.compile(rf"(?<![\w#.$\\])({_ID})(?![\w]|[,.][0-9])")
#: In a Python name, an id is a segment between underscores: test_d3_runs_before_d4, test_m9_2_deadline.
NAME_ID = re.compile(rf"(?<![A-Za-z0-9])([{FAMILIES.lower()}]{_NUM})(?:_([1-9][0-9]?)(?=_|$))?(?=_|$)")
HARDWARE = re.compile(r"(?:NVIDIA|Nvidia|nvidia|Tesla|AMD)[\s-]*$")
GPU_AFTER = re.compile(r"\s*(?:GPU|gpu)")
#: Citations of documents that a clone of the repository does not have.
OUTSIDE = re.compile(r"\bSPEC\b|§|\.\./shared|/work/shared|shared/SPEC|\bseeds?/|\bthe seeds\b|\bseeds'|"
                     r"the-menu\.md|ADR-0029-menu|\bADR-?\d{2,4}\b")
#: A defining line of docs/rules.md: a heading ("### D3 — ...") or a table row ("| M9.2 | ... |").
DEFINES = re.compile(rf"^(?:#{{2,4}}\s+({_ID})\b|\|\s*({_ID})\s*\|)")


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    token: str
    kind: str  # "undefined" | "outside"

    def __str__(self) -> str:
        what = "cites a rule docs/rules.md does not define" if self.kind == "undefined" else \
            "cites a document that is not in the repository"
        return f"{self.path}:{self.line}: {self.token!r} {what}"


def defined_ids(text: str) -> set[str]:
    """The ids a rules page defines, from its headings and table rows."""
    out: set[str] = set()
    for line in text.splitlines():
        m = DEFINES.match(line.strip())
        if m:
            out.add(m.group(1) or m.group(2))
    return out


def prose_ids(text: str) -> Iterator[str]:
    """Rule ids in a stretch of prose, leaving out hardware names such as "NVIDIA A10" or "A10 GPU"."""
    for m in PROSE_ID.finditer(text):
        if HARDWARE.search(text[: m.start()]) or GPU_AFTER.match(text, m.end()):
            continue
        yield m.group(1)


def name_ids(name: str) -> Iterator[str]:
    """Rule ids in a Python name: `test_m9_2_x` cites M9.2, `test_d3_runs_before_d4` cites D3 and D4."""
    for m in NAME_ID.finditer(name):
        base = m.group(1).upper()
        yield f"{base}.{m.group(2)}" if m.group(2) else base


def _docstring_lines(tree: ast.AST) -> set[int]:
    """Start lines of every string that stands alone as a statement: module, class and function docstrings, and
    the ones written under an assignment to document it."""
    return {node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def python_prose(source: str) -> Iterator[tuple[int, str, bool]]:
    """(line, text, is_name) for each comment, docstring line, and function or class name of a Python source."""
    tree = ast.parse(source)
    docs = _docstring_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.lineno, node.name, True
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string, False
        elif tok.type == tokenize.STRING and tok.start[0] in docs:
            for i, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + i, line, False


_COMMENTS = {
    ".yaml": [re.compile(r"#(.*)$", re.M)], ".yml": [re.compile(r"#(.*)$", re.M)],
    ".toml": [re.compile(r"#(.*)$", re.M)], ".sh": [re.compile(r"#(.*)$", re.M)],
    ".cfg": [re.compile(r"[#;](.*)$", re.M)], ".ini": [re.compile(r"[#;](.*)$", re.M)],
    ".js": [re.compile(r"//(.*)$", re.M), re.compile(r"/\*(.*?)\*/", re.S)],
    ".css": [re.compile(r"/\*(.*?)\*/", re.S)],
    ".html": [re.compile(r"<!--(.*?)-->", re.S)], ".jinja": [re.compile(r"\{#(.*?)#\}", re.S)],
}


def other_prose(text: str, suffix: str) -> Iterator[tuple[int, str, bool]]:
    """(line, text, False) for each comment of a non-Python file; every line of Markdown and plain text."""
    if suffix in (".md", ".txt"):
        for i, line in enumerate(text.splitlines(), 1):
            yield i, line, False
        return
    for rx in _COMMENTS.get(suffix, []):
        for m in rx.finditer(text):
            first = text.count("\n", 0, m.start(1)) + 1
            for i, line in enumerate(m.group(1).splitlines()):
                yield first + i, line, False


def check_text(rel: str, text: str, suffix: str, defined: set[str]) -> list[Hit]:
    """Every unresolved citation in one file's text."""
    hits: list[Hit] = []
    prose = python_prose(text) if suffix == ".py" else other_prose(text, suffix)
    for line, chunk, is_name in prose:
        for token in (name_ids(chunk) if is_name else prose_ids(chunk)):
            if token not in defined:
                hits.append(Hit(rel, line, token, "undefined"))
    for i, line in enumerate(text.splitlines(), 1):
        for m in OUTSIDE.finditer(line):
            hits.append(Hit(rel, i, m.group(0), "outside"))
    return sorted(set(hits), key=lambda h: (h.path, h.line, h.token))


def kind_of(path: Path) -> str | None:
    """The suffix whose prose rules a file is read by, or None for data (JSON, images, lock files).

    A file without a suffix is a script when it starts with `#!` (.ci/run), so its `#` comments are read."""
    for key in (path.name, path.suffix):
        if key in ALIASES:
            return ALIASES[key]
    if path.suffix in SUFFIXES:
        return path.suffix
    if not path.suffix:
        with path.open("rb") as f:
            return ".sh" if f.read(2) == b"#!" else None
    return None


def repository_files(root: Path = ROOT) -> list[Path]:
    """Every file of the repository: what git tracks plus what it would add (untracked, not ignored), or, outside
    a git checkout, every file below `root`."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout
        names = sorted({n for n in out.decode("utf-8").split("\0") if n})
        found = [root / n for n in names]
    except (OSError, subprocess.CalledProcessError):
        found = sorted(f for f in root.rglob("*"))
    return [f for f in found if f.is_file() and not SKIP_DIRS & set(f.relative_to(root).parts)]


def scanned_files(root: Path = ROOT) -> Iterable[tuple[Path, str]]:
    """(file, kind) for each text file of the repository but this one, whose samples cite on purpose."""
    me = Path(__file__).resolve()
    for f in repository_files(root):
        kind = kind_of(f)
        if kind is not None and f.resolve() != me:
            yield f, kind


def check_repository(root: Path = ROOT) -> list[Hit]:
    defined = defined_ids(RULES.read_text(encoding="utf-8"))
    hits: list[Hit] = []
    for f, kind in scanned_files(root):
        hits.extend(check_text(str(f.relative_to(root)), f.read_text(encoding="utf-8"), kind, defined))
    return hits


# ---------------------------------------------------------------------------------------------------------------------


def test_every_cited_rule_id_is_defined_and_nothing_cites_an_outside_document() -> None:
    hits = check_repository()
    assert not hits, "\n".join(str(h) for h in hits)


def test_rules_md_defines_the_ids_the_code_has_always_cited() -> None:
    defined = defined_ids(RULES.read_text(encoding="utf-8"))
    expected = {f"{f}{n}" for f, last in (("A", 8), ("C", 9), ("M", 9), ("D", 12), ("H", 12), ("R", 6), ("S", 2))
                for n in range(1, last + 1)}
    assert expected <= defined, sorted(expected - defined)
    assert {i[0] for i in defined} <= set(FAMILIES), "a family docs/rules.md uses is missing from FAMILIES"


def test_rules_md_defines_each_id_once() -> None:
    ids = [m.group(1) or m.group(2) for line in RULES.read_text(encoding="utf-8").splitlines()
           if (m := DEFINES.match(line.strip()))]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, dupes


# -- The checker itself, on a small sample ----------------------------------------------------------------------------

SAMPLE_RULES = """\
## D: delivery
### D1 — Not at Rest
### D3 — Another state's pick
| id | part |
|----|------|
| M9.2 | a timer |
"""

SAMPLE_PY = '''\
"""Checks D1 and M9.2, not D7."""  # D3 is fine in a comment, Z9 is no family

CHART = {"initial": "A1", "states": {"A1": {"on": {"D7": "B2"}}}}  # state names are not citations
PATH = "M0,0 L10,5"
"""An attribute docstring is prose: D8."""


def test_d3_runs_before_d4() -> None:
    """An H100 GPU, hex 0xA1, colour #C1C1C1 and an NVIDIA A10 are not rule ids; M10,5 is a coordinate."""


def test_m9_2_deadline() -> None:  # see SPEC \u00a70
    pass
'''


def test_the_checker_reads_headings_and_table_rows_as_definitions() -> None:
    assert defined_ids(SAMPLE_RULES) == {"D1", "D3", "M9.2"}


def test_the_checker_names_file_line_and_token_for_each_unresolved_citation() -> None:
    hits = check_text("x.py", SAMPLE_PY, ".py", defined_ids(SAMPLE_RULES))
    assert [(h.line, h.token, h.kind) for h in hits] == [
        (1, "D7", "undefined"),
        (5, "D8", "undefined"),
        (8, "D4", "undefined"),
        (12, "SPEC", "outside"),
        (12, "§", "outside"),
    ]
    assert str(hits[0]) == "x.py:1: 'D7' cites a rule docs/rules.md does not define"


def test_the_checker_reads_ids_in_test_names_and_leaves_other_names_alone() -> None:
    assert list(name_ids("test_d3_runs_before_d4")) == ["D3", "D4"]
    assert list(name_ids("test_m9_2_a_deadline")) == ["M9.2"]
    assert list(name_ids("test_h10_providers")) == ["H10"]
    assert list(name_ids("test_b1_to_b2_and_h100_and_md5_2x")) == []


def test_the_checker_leaves_non_ids_alone_in_prose() -> None:
    text = "H100, A100 GPU, an A10 GPU, NVIDIA A10, 0xD1, #C1C1C1, M0,0 L10,5, M10,5, v1.D3, D13x, BD3"
    assert list(prose_ids(text)) == []
    assert list(prose_ids("D1-D12, (M9.2), D3/D4 and C8.")) == ["D1", "D12", "M9.2", "D3", "D4", "C8"]


def test_the_checker_scans_only_comments_in_other_file_kinds() -> None:
    defined = {"D1"}
    js = 'const p = "M0,0 D9";\n// D9 is cited here\n/* and D1\n here D8 */\n'
    assert [(h.line, h.token) for h in check_text("a.js", js, ".js", defined)] == [(2, "D9"), (4, "D8")]
    yaml = "accelerator: A3  # D2 here\nname: D9\n"
    assert [(h.line, h.token) for h in check_text("a.yaml", yaml, ".yaml", defined)] == [(1, "D2")]
    md = "See D1 and D2.\n\n```\nstate D5\n```\nFrom ../" "shared/SPEC.md and the-menu.md.\n"
    assert [(h.line, h.token) for h in check_text("a.md", md, ".md", defined)] == [
        (1, "D2"), (4, "D5"), (6, "../" "shared"), (6, "SPEC"), (6, "the-menu.md")]


def test_the_checker_reads_every_text_file_of_the_repository_by_its_kind(tmp_path: Path) -> None:
    (tmp_path / "run").write_text("#!/usr/bin/env bash\n# D9 here\n")
    (tmp_path / "notes").write_text("D9, but no shebang: not prose\n")
    for name, text in (("Dockerfile", "# D9\n"), ("a.env.example", "# D9\n"), ("x.mjs", "// D9\n"),
                       ("data.json", '{"D9": 1}')):
        (tmp_path / name).write_text(text)
    kinds = {f.name: kind_of(f) for f in tmp_path.iterdir()}
    assert kinds == {"run": ".sh", "notes": None, "Dockerfile": ".sh", "a.env.example": ".sh", "x.mjs": ".js",
                     "data.json": None}
    names = {str(f.relative_to(ROOT)) for f, _ in scanned_files()}
    assert {".ci/run", ".ci/install", "cluster/Dockerfile", "cluster/README.md", "pyproject.toml",
            "docs/rules.md", "jr2ray/harness/turn.py"} <= names
    assert str(Path(__file__).resolve().relative_to(ROOT)) not in names
