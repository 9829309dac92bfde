"""The `effect.command` kind: a real subprocess, killed with the Run's process so a crash cannot finish it."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
from pathlib import Path
from typing import Any

from jr2ray.authoring import CommandEffect
from jr2ray.settings import Settings

from .registry import EffectFailed, params_of, register, resolve_value


def _die_with_parent() -> None:
    """Linux: the subprocess is killed when the Run's process dies, so a crash cannot finish it behind our back."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def confine(raw: str, workdir: Path, allowed: tuple[str, ...], what: str) -> str:
    """`raw` resolved (symlinks included) against the workspace; refused unless it lies inside the workspace or
    under a path the workflow author allowed."""
    path = Path(os.path.realpath(workdir / Path(str(raw)).expanduser()))
    roots = [Path(os.path.realpath(workdir)), *(Path(os.path.realpath(Path(a).expanduser())) for a in allowed)]
    if not any(path == r or r in path.parents for r in roots):
        raise ValueError(f"{what} {raw!r} is outside the run's workspace {str(workdir)!r} and not under an "
                         f"allowed path (allow_paths={list(allowed)})")
    return str(path)


class CommandEffector:
    """Output: {exit_code, stdout, stderr}. An exit code outside `ok_exit_codes` is an EffectFailed carrying the
    same fields, so the chart's onError sees them; a command killed by a signal did not complete, so it raises."""

    def resolve(self, spec: CommandEffect, context: dict[str, Any], input: Any, workdir: Path) -> dict[str, Any]:
        params = params_of(spec, input, "effect.command")
        argv = [str(a) for a in resolve_value(spec.argv, context, "effect.command argv", params)]
        raw_cwd = resolve_value(spec.cwd, context, "effect.command cwd", params)
        cwd = confine(raw_cwd, workdir, spec.allow_paths, "cwd") if raw_cwd is not None else str(workdir)
        files = [confine(f, workdir, spec.allow_paths, "file")
                 for f in resolve_value(spec.files, context, "effect.command files", params) or ()]
        return {"kind": "command", "argv": argv, "cwd": cwd, "files": files, "timeout_s": spec.timeout_s,
                "ok_exit_codes": list(spec.ok_exit_codes)}

    async def run(self, call: dict[str, Any], settings: Settings) -> dict[str, Any]:
        Path(call["cwd"]).mkdir(parents=True, exist_ok=True)  # the workspace is made when first used
        proc = await asyncio.create_subprocess_exec(*call["argv"], cwd=call.get("cwd"),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                    preexec_fn=_die_with_parent)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=call["timeout_s"])
        except (TimeoutError, asyncio.CancelledError):
            proc.kill()
            await proc.wait()
            raise
        if proc.returncode is not None and proc.returncode < 0:
            # Killed by a signal (our own crash included): it did not complete, so it is an error, not an output.
            raise RuntimeError(f"command killed by signal {-proc.returncode}")
        output = {"exit_code": proc.returncode, "stdout": out.decode(errors="replace"),
                  "stderr": err.decode(errors="replace")}
        if proc.returncode not in call.get("ok_exit_codes", [0]):
            raise EffectFailed(f"command exited {proc.returncode}", output)
        return output


register(CommandEffect.kind, CommandEffector())
