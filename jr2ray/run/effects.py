"""Effects: a real subprocess or a real HTTP call, run at most once by the Run (R4)."""

from __future__ import annotations

import asyncio
import ctypes
import signal
import sys
from typing import Any

import httpx

from jr2ray.authoring import CommandEffect, HttpEffect
from jr2ray.chart import bind


def _resolve(value: Any, context: dict[str, Any], where: str) -> Any:
    if callable(value):
        return bind(value, where, "effect argument")({"context": context})
    return value


def resolve_effect(spec: CommandEffect | HttpEffect, context: dict[str, Any], input: Any) -> dict[str, Any]:
    """The concrete call, fixed when the Effect starts (so a journal can say exactly what ran)."""
    if isinstance(spec, CommandEffect):
        argv = [str(a) for a in _resolve(spec.argv, context, "effect.command argv")]
        cwd = _resolve(spec.cwd, context, "effect.command cwd")
        if isinstance(input, dict):
            argv = [str(a) for a in input.get("argv", argv)]
            cwd = input.get("cwd", cwd)
        return {"kind": "command", "argv": argv, "cwd": cwd, "timeout_s": spec.timeout_s}
    url = _resolve(spec.url, context, "effect.http url")
    body = _resolve(spec.json, context, "effect.http json")
    if isinstance(input, dict):
        url = input.get("url", url)
        body = input.get("json", body)
    return {"kind": "http", "method": spec.method, "url": url, "json": body, "timeout_s": spec.timeout_s}


def _die_with_parent() -> None:
    """Linux: the subprocess is killed when the Run's process dies, so a crash cannot finish it behind our back."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


async def run_effect(call: dict[str, Any]) -> dict[str, Any]:
    """Run it. Output: {exit_code, stdout, stderr} or {status, json|text}. Raises on timeout or transport error."""
    if call["kind"] == "command":
        proc = await asyncio.create_subprocess_exec(*call["argv"], cwd=call.get("cwd"),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                    preexec_fn=_die_with_parent)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=call["timeout_s"])
        except (asyncio.TimeoutError, asyncio.CancelledError):
            proc.kill()
            await proc.wait()
            raise
        if proc.returncode is not None and proc.returncode < 0:
            # Killed by a signal (our own crash included): it did not complete, so it is an error, not an output.
            raise RuntimeError(f"command killed by signal {-proc.returncode}")
        return {"exit_code": proc.returncode, "stdout": out.decode(errors="replace"),
                "stderr": err.decode(errors="replace")}
    async with httpx.AsyncClient(timeout=call["timeout_s"]) as client:
        resp = await client.request(call["method"], call["url"], json=call.get("json"))
    try:
        return {"status": resp.status_code, "json": resp.json()}
    except ValueError:
        return {"status": resp.status_code, "text": resp.text}
