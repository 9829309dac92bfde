"""Strict JSON for request bodies: what is stored must read back the same, in every JSON reader.

Python's `json` accepts `NaN` and `Infinity` (not JSON), and `"\\ud800"` (a lone surrogate, which no UTF-8 encoder
can write). Stored in a run's input or a pick's args, either one breaks every later read of that run (the listing,
the Console, the CLI). Numbers beyond +/-(2**53 - 1) (`1e30`, a 40-digit integer) do not survive a JavaScript
reader such as the Console's. So all of these are refused with 400 before anything is stored. A body that is not
JSON at all is left to the routes' own validation, which words that refusal.
"""

from __future__ import annotations

import json
import math
from typing import Any

SAFE_INT = 2**53 - 1


class _Refused(ValueError):
    pass


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > SAFE_INT:
        raise _Refused(f"the number {text} is outside +/-{SAFE_INT}, the range every JSON reader keeps exactly")
    return value


def _int(text: str) -> int:
    if len(text) > 20 or abs(int(text)) > SAFE_INT:
        raise _Refused(f"the number {text[:24]} is outside +/-{SAFE_INT}, the range every JSON reader keeps exactly")
    return int(text)


def _strings(value: Any) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise _Refused("a string holds a lone surrogate (such as \\ud800), which UTF-8 cannot store") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def problem(body: bytes) -> str | None:
    """Why `body` cannot be stored as standard JSON, or None (also None when it is not JSON at all)."""
    if not body:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"it is not valid UTF-8 (byte {exc.start})"
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
        _strings(value)
    except _Refused as exc:
        return str(exc)
    except (ValueError, RecursionError):
        return None  # not JSON: the route's validation says what is wrong
    return None
