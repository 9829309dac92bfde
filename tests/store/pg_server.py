"""A throwaway PostgreSQL server for tests and benchmarks: its own data directory in a temp dir, a loopback port,
trust auth for one superuser, stopped and removed afterwards.

PostgreSQL refuses to run as root, and CI runs as root: then the server runs as an unprivileged system user
(JR2RAY_PG_USER, else Debian's `postgres`, else `nobody`) through `runuser`, and the temp dir is handed to it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "jr2ray"
DATABASE = "jr2ray"


def pg_bin(name: str) -> str | None:
    """A PostgreSQL server binary: on PATH, else in Debian's versioned directory (the package does not link it)."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                      key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    return versions[-1] if versions else None


def available() -> bool:
    return all(pg_bin(n) for n in ("initdb", "pg_ctl"))


def _user() -> str | None:
    """Who runs the server: None when we are not root (then it is us)."""
    if os.geteuid() != 0:
        return None
    for name in (os.environ.get("JR2RAY_PG_USER"), "postgres", "nobody"):
        if not name:
            continue
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """Start with `start()`, stop with `stop()`; `url` is a libpq URL of its database."""

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable  # False: fsync off, as fits a throwaway test server
        self.dir = Path(tempfile.mkdtemp(prefix="jr2ray-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = 0
        self.user = _user()

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, *args: str) -> None:
        cmd = list(args) if self.user is None else ["runuser", "-u", self.user, "--", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr[-2000:]}\n{log}")

    def start(self) -> PgServer:
        initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise RuntimeError("PostgreSQL's initdb/pg_ctl are not installed (Debian: apt-get install postgresql)")
        if self.user is not None:
            ent = pwd.getpwnam(self.user)
            os.chown(self.dir, ent.pw_uid, ent.pw_gid)
        self._run(initdb, "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync",
                  "--no-instructions")
        opts = ["-c listen_addresses=127.0.0.1", f"-c unix_socket_directories={self.dir}"]
        if not self.durable:
            opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        for _ in range(5):  # a port another engineer's test took in between: try another
            self.port = _free_port()
            try:
                self._run(pg_ctl, "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                          "-o", " ".join([f"-p {self.port}", *opts]), "start")
                break
            except RuntimeError:
                if "already in use" not in (self.log.read_text() if self.log.exists() else ""):
                    raise
        self._run(pg_bin("createdb") or "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER,
                  DATABASE)
        return self

    def stop(self) -> None:
        pg_ctl = pg_bin("pg_ctl")
        try:
            if pg_ctl and (self.data / "postmaster.pid").exists():
                self._run(pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
