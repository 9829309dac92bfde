"""Who may call the API: the instance token, and per-Turn scoped tokens for Harnesses.

Why two kinds: the operator (CLI, Console, webhooks) holds the instance token and may do anything. A Harness runs
model-written tool calls, so it gets a token that can only read the surface of, and pick for, its own Turn. It can
never start runs, read other runs, or answer a Gate (an Agent must never play the editor).

A scoped token is `h.<iid>.<hex HMAC-SHA256(instance_token, iid)>`: stateless, so the API needs nothing but the
instance token to check it, and a leaked one is worth one Turn.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

TOKEN_FILE = "token"
HARNESS_PREFIX = "h."
_IID = re.compile(r"^[A-Za-z0-9_-]+\.t\d+$")


class Principal(BaseModel):
    """The caller a valid Bearer token names."""

    kind: Literal["instance", "harness"]
    iid: str | None = None  # the one Turn a harness token is good for


def token_path(home: str | Path) -> Path:
    return Path(home).expanduser() / TOKEN_FILE


def ensure_token(home: str | Path) -> tuple[str, bool]:
    """Read the instance token, creating it (mode 0600) on first use. Returns (token, created now)."""
    path = token_path(home)
    if path.exists():
        existing = path.read_text().strip()
        if existing:
            if path.stat().st_mode & 0o077:  # readable by others (copied in, or an old umask): close it
                os.chmod(path, 0o600)
            return existing, False
        path.unlink()  # an empty file is no token: make a real one
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    # O_EXCL + mode 0600 at creation: the secret is never readable by others, not even for an instant.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another `up` won the race: use its token
        return path.read_text().strip(), False
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    os.chmod(path, 0o600)
    return token, True


def read_token(home: str | Path) -> str | None:
    path = token_path(home)
    return path.read_text().strip() if path.exists() else None


def _mac(instance_token: str, iid: str) -> str:
    return hmac.new(instance_token.encode(), iid.encode(), hashlib.sha256).hexdigest()


def harness_token(instance_token: str, iid: str) -> str:
    """The scoped token a TurnLauncher hands the Harness that plays Turn `iid` (`<run id>.t<seq>`)."""
    if not _IID.match(iid):
        raise ValueError(f"not a Turn iid: {iid!r}")
    return f"{HARNESS_PREFIX}{iid}.{_mac(instance_token, iid)}"


def authenticate(authorization: str | None, instance_token: str) -> Principal | None:
    """The Principal an `Authorization` header proves, or None (then the caller gets 401)."""
    if not authorization or not instance_token:
        return None
    scheme, _, credential = authorization.partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        return None
    if hmac.compare_digest(credential.encode(), instance_token.encode()):
        return Principal(kind="instance")
    if credential.startswith(HARNESS_PREFIX):
        iid, _, mac = credential[len(HARNESS_PREFIX):].rpartition(".")
        if _IID.match(iid) and hmac.compare_digest(mac.encode(), _mac(instance_token, iid).encode()):
            return Principal(kind="harness", iid=iid)
    return None
