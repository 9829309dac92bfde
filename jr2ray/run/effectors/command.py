"""The `effect.command` kind: a real subprocess, killed with the Run's process so a crash cannot finish it."""

from __future__ import annotations

import asyncio
import ctypes
import signal
import sys
from typing import Any

from jr2ray.authoring import CommandEffect

from .registry import register, resolve_value


def _die_with_parent() -> None:
    """Linux: the subprocess is killed when the Run's process dies, so a crash cannot finish it behind our back."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class CommandEffector:
    """Output: {exit_code, stdout, stderr}. A command killed by a signal did not complete, so it raises."""

    def resolve(self, spec: CommandEffect, context: dict[str, Any], input: Any) -> dict[str, Any]:
        argv = [str(a) for a in resolve_value(spec.argv, context, "effect.command argv")]
        cwd = resolve_value(spec.cwd, context, "effect.command cwd")
        if isinstance(input, dict):
            argv = [str(a) for a in input.get("argv", argv)]
            cwd = input.get("cwd", cwd)
        return {"kind": "command", "argv": argv, "cwd": cwd, "timeout_s": spec.timeout_s}

    async def run(self, call: dict[str, Any]) -> dict[str, Any]:
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
        return {"exit_code": proc.returncode, "stdout": out.decode(errors="replace"),
                "stderr": err.decode(errors="replace")}


register(CommandEffect.kind, CommandEffector())
