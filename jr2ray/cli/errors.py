"""Every refusal the CLI prints, worded once, and its exit codes (0 ok, 1 error, 2 usage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A failure to report on stderr with exit code 1 (or `code`)."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def not_json(what: str, exc: Exception) -> CliError:
    return CliError(f"{what} is not valid JSON: {exc}", EXIT_USAGE)


def not_an_object(what: str) -> CliError:
    return CliError(f"{what} must be a JSON object", EXIT_USAGE)


def bad_settings(exc: Exception) -> CliError:
    return CliError(f"bad settings: {exc}", EXIT_USAGE)


def no_instance_recorded(path: Path) -> CliError:
    """No guessing (say :8000): the token must only ever go to the instance it belongs to."""
    return CliError(f"no jr2ray instance recorded in {path}: run `jr2ray up`, or pass --api "
                    f"(or JR2RAY_API) to reach one elsewhere")


def no_instance(path: Path) -> CliError:
    return CliError(f"no instance recorded in {path}")


def no_api(url: str) -> CliError:
    return CliError(f"no jr2ray API at {url}: is `jr2ray up` running?")


def http_failed(method: str, path: str, exc: Exception) -> CliError:
    return CliError(f"{method} {path}: {exc}")


def api_refused(status: int, data: Any) -> CliError:
    """A 4xx/5xx from the API: its reason, and what a Gate accepts now when the API says so."""
    detail = data.get("detail") if isinstance(data, dict) else data
    msg = f"{status}: {detail}"
    if isinstance(data, dict) and "accepts_now" in data:
        msg += f" (accepts now: {', '.join(data['accepts_now']) or 'nothing'})"
    return CliError(msg)


def already_ended(run_id: str, status: Any) -> CliError:
    return CliError(f"run {run_id} had already ended ({status}); nothing was cancelled")


def stream_keeps_breaking(run_id: str, error: str) -> CliError:
    return CliError(f"the event stream of run {run_id} keeps breaking off ({error})")


def prefix_too_short(prefix: str, minimum: int) -> CliError:
    return CliError(f"run id prefix {prefix!r} is shorter than {minimum} characters", EXIT_USAGE)


def bad_interval(seconds: float) -> CliError:
    return CliError(f"--interval must be more than 0 seconds, got {seconds:g}", EXIT_USAGE)


def no_run_matches(prefix: str) -> CliError:
    return CliError(f"no run matches {prefix!r}")


def prefix_ambiguous(prefix: str, hits: list[str]) -> CliError:
    return CliError(f"run id prefix {prefix!r} is ambiguous: {', '.join(sorted(hits))}")


def ray_start_failed(output: str) -> CliError:
    return CliError(f"`ray start` failed:\n{output}")


def did_not_answer(url: str, timeout_s: float, last: str) -> CliError:
    return CliError(f"{url} did not answer within {timeout_s:.0f}s ({last})")


def llm_unavailable(which: str, exc: Exception) -> CliError:
    return CliError(f"--llm {which} needs serve/llm/ and its extras ({exc})")


def bad_workflows(exc: Exception) -> CliError:
    """The catalog `up` would serve is unusable: a --workflows module that does not import, a name claimed twice."""
    return CliError(f"workflows: {exc}", EXIT_USAGE)


def bad_store(reason: str) -> CliError:
    """A store `up` cannot serve (a database that does not answer, a placement it cannot take): nothing started."""
    return CliError(f"{reason}; nothing was started", EXIT_USAGE)


def bad_map(exc: Exception) -> CliError:
    """`jr2ray migrate --map` that is not old.path=new.path."""
    return CliError(str(exc), EXIT_USAGE)


def copy_onto_itself(store: str) -> CliError:
    return CliError(f"the store to copy to is the one copied from ({store})", EXIT_USAGE)


def copy_while_up(store: str, home: Path) -> CliError:
    """A live instance keeps writing its store: a copy taken under it would miss what it writes next."""
    return CliError(f"the instance of {home} is up on the store {store}; run `jr2ray down` first (nothing was "
                    "copied)")


def copy_refused(reason: str) -> CliError:
    return CliError(f"store copy: {reason}")


def ray_unreachable(home: Path, address: str, reason: str) -> CliError:
    """The recorded instance's Ray did not take this process as a driver: never a traceback, never another Ray."""
    return CliError(f"the jr2ray instance of {home} (Ray at {address}) does not answer ({reason}); bring it back "
                    "with `jr2ray up`")


def ray_port_in_worker_range(port: int, low: int, high: int) -> CliError:
    """A GCS port among Ray's worker ports would be taken by a worker sooner or later: refused before Ray starts."""
    return CliError(f"--ray-port {port} is inside Ray's worker port range ({low}-{high}); pick a port outside it "
                    "(default 6379, else a free one); nothing was started", EXIT_USAGE)


def bad_ray_port(port: int) -> CliError:
    return CliError(f"--ray-port {port} is not a TCP port (1-65535); nothing was started", EXIT_USAGE)


def gcs_redis_unreachable(address: str, reason: str) -> CliError:
    """`up --gcs-redis` names a Redis that does not answer: a head started on it could not keep its GCS state."""
    return CliError(f"the GCS Redis at {address} does not answer ({reason}); start it, or run `up --gcs-redis ''` to "
                    "start Ray without GCS fault tolerance; nothing was started", EXIT_USAGE)


def metrics_port_taken(port: int) -> CliError:
    return CliError(f"metrics port {port} is already taken: pick another with --metrics-port or JR2RAY_METRICS_PORT "
                    "(0: a free port)")


def no_logs(where: Path) -> CliError:
    return CliError(f"no jr2ray logs in {where}: is this the home `jr2ray up` ran with?")
