"""The xstate side: one long-lived `node runner.mjs` process that runs many cases (JSON lines both ways)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from collections.abc import Callable
from typing import Any

from xstate_jr2ray import MAX_MICROSTEPS

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "runner.mjs"


def missing() -> str | None:
    """Why the xstate side cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (HERE / "node_modules" / "xstate" / "package.json").is_file():
        return "tests/xstate/node_modules has no xstate: run `npm ci` in tests/xstate (or .ci/install)"
    return None


def installed_version() -> str:
    data = json.loads((HERE / "node_modules" / "xstate" / "package.json").read_text())
    return str(data["version"])


class XstateRunner:
    """Send cases, get each case's step records back in order."""

    def __init__(self) -> None:
        env = {**os.environ, "JR2RAY_XSTATE_MAX_MICROSTEPS": str(MAX_MICROSTEPS)}
        self.proc = subprocess.Popen(["node", str(RUNNER)], cwd=HERE, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1, env=env)

    def start_many(self, cases: list[dict[str, Any]]) -> Callable[[], list[dict[str, Any]]]:
        """Run the cases in the background (xstate works while the caller runs jr2ray); call the result to wait."""
        box: list[Any] = []
        worker = threading.Thread(target=lambda: box.append(self._guarded_many(cases)), daemon=True)
        worker.start()

        def wait() -> list[dict[str, Any]]:
            worker.join()
            if isinstance(box[0], BaseException):
                raise box[0]
            return box[0]
        return wait

    def _guarded_many(self, cases: list[dict[str, Any]]) -> Any:
        try:
            return self.run_many(cases)
        except BaseException as exc:
            return exc

    def run_many(self, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        lines = [json.dumps(c) + "\n" for c in cases]
        stdin = self.proc.stdin

        def feed() -> None:
            for line in lines:
                stdin.write(line)
            stdin.flush()

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        out = []
        for _ in cases:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"runner.mjs exited (code {self.proc.poll()})")
            out.append(json.loads(line))
        writer.join()
        return out

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        return self.run_many([case])[0]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def __enter__(self) -> XstateRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
