"""Working tools for `read` and `write` workspaces: files and commands confined to the Turn's `cwd`.

They never touch the workflow; their only job is to let a workspace Agent do its work between picks. Every text they
return comes from `jr2ray.menu.texts`.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from jr2ray.menu import texts
from jr2ray.menu.models import MenuItem, Workspace


class WorkingTools:
    """Runs the Working tools of one workspace. Paths resolve (symlinks included) inside `cwd` or are refused."""

    def __init__(
        self,
        mode: Workspace,
        cwd: str | os.PathLike[str],
        *,
        max_read_chars: int = 100_000,
        max_output_chars: int = 20_000,
        default_timeout_s: float = 120.0,
    ) -> None:
        if mode == "none":
            raise ValueError("a 'none' workspace has no Working tools")
        self.mode = mode
        self.root = Path(cwd).resolve()
        self.items: list[MenuItem] = texts.working_tools(mode)
        self.names: frozenset[str] = frozenset(item.name for item in self.items)
        self._max_read = max_read_chars
        self._max_output = max_output_chars
        self._timeout = default_timeout_s

    def _inside(self, raw: Any) -> Path | None:
        if not isinstance(raw, str):
            return None
        target = (self.root / raw).resolve()
        if target == self.root or self.root in target.parents:
            return target
        return None

    async def call(self, name: str, args: dict[str, Any]) -> str:
        """Run one Working tool and return the text the model reads. Never raises for the model's mistakes."""
        if name not in self.names:
            return texts.bad_working_args(name, "not_a_tool")
        try:
            if name == "read_file":
                return await asyncio.to_thread(self._read_file, args)
            if name == "list_dir":
                return await asyncio.to_thread(self._list_dir, args)
            if name == "write_file":
                return await asyncio.to_thread(self._write_file, args)
            return await self._run_command(args)
        except OSError as exc:
            return texts.os_failure(name, type(exc).__name__, str(exc.strerror or exc))

    def _read_file(self, args: dict[str, Any]) -> str:
        raw = args.get("path")
        if not isinstance(raw, str) or not raw:
            return texts.bad_working_args("read_file", "path")
        target = self._inside(raw)
        if target is None:
            return texts.outside_workspace(raw)
        if not target.exists():
            return texts.not_found(raw)
        if target.is_dir():
            return texts.is_a_directory(raw)
        text = target.read_bytes().decode("utf-8", errors="replace")
        shown = text[: self._max_read]
        return texts.file_content(shown, len(shown), len(text))

    def _list_dir(self, args: dict[str, Any]) -> str:
        raw = args.get("path", ".")
        if raw in (None, ""):
            raw = "."
        if not isinstance(raw, str):
            return texts.bad_working_args("list_dir", "path_type")
        target = self._inside(raw)
        if target is None:
            return texts.outside_workspace(raw)
        if not target.exists():
            return texts.not_found(raw)
        if not target.is_dir():
            return texts.not_a_directory(raw)
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())
        return texts.dir_listing(entries)

    def _write_file(self, args: dict[str, Any]) -> str:
        raw = args.get("path")
        content = args.get("content")
        if not isinstance(raw, str) or not raw:
            return texts.bad_working_args("write_file", "path")
        if not isinstance(content, str):
            return texts.bad_working_args("write_file", "content")
        target = self._inside(raw)
        if target is None or target == self.root:
            return texts.outside_workspace(raw)
        if target.is_dir():
            return texts.is_a_directory(raw)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return texts.wrote_file(raw, len(content))

    async def _run_command(self, args: dict[str, Any]) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return texts.bad_working_args("run_command", "command")
        timeout = args.get("timeout_s", self._timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            return texts.bad_working_args("run_command", "timeout")
        proc = await asyncio.create_subprocess_shell(
            command,
            cwd=str(self.root),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        # Drain both pipes as the command runs, so a timeout still returns what it printed so far.
        out_buf, err_buf = bytearray(), bytearray()
        drains = [
            asyncio.create_task(_drain(proc.stdout, out_buf)),
            asyncio.create_task(_drain(proc.stderr, err_buf)),
        ]
        try:
            await asyncio.wait_for(proc.wait(), timeout=float(timeout))
        except (TimeoutError, asyncio.CancelledError) as exc:
            self._kill(proc)
            await proc.wait()
            await asyncio.gather(*drains, return_exceptions=True)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return texts.command_timed_out(float(timeout), self._clip(out_buf), self._clip(err_buf))
        await asyncio.gather(*drains)
        return texts.command_result(proc.returncode or 0, self._clip(out_buf), self._clip(err_buf))

    def _clip(self, data: bytes | bytearray) -> str:
        return texts.truncated_output(data.decode("utf-8", errors="replace"), self._max_output)

    @staticmethod
    def _kill(proc: asyncio.subprocess.Process) -> None:
        """Kill the whole process group, so a shell's children do not outlive the Turn."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def _drain(stream: asyncio.StreamReader, into: bytearray) -> None:
    while chunk := await stream.read(65536):
        into.extend(chunk)
