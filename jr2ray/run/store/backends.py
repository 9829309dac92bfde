"""Which backend serves a store setting: each backend registers under the URL schemes it serves, and a setting with
no scheme (a plain path) is a directory, served by the backend registered under `DIRECTORY`.

This is the only place that reads a store setting's form. Everything else asks it: `open_store` for the store,
`is_shared` for whether several nodes can use it (where a run's actors may go), `ping` for whether it answers. A new
backend is one module with a `StoreBackend` and one `register_backend` call; no caller changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from jr2ray.settings import is_url

if TYPE_CHECKING:
    from jr2ray.settings import Settings

    from .base import JournalStore

DIRECTORY = ""  # the "scheme" of a setting that is a plain path


class UnknownStoreScheme(ValueError):
    """A store setting names a URL scheme no backend serves."""


class StoreBackend(Protocol):
    """One kind of journal store. `name` is what lists it (tests run the store suite once per name); `schemes` are
    the URL schemes it serves (`DIRECTORY` for a plain path); `shared` says whether processes on several nodes can
    open one store of this kind by its setting (placement reads it before any store is opened)."""

    @property
    def name(self) -> str: ...

    @property
    def schemes(self) -> tuple[str, ...]: ...

    @property
    def shared(self) -> bool: ...

    def open(self, location: str, settings: Settings | None) -> JournalStore:
        """The store `location` names. `settings` carries the backend's own settings (a pool size...); None: their
        defaults. Opening may create it (a directory, a schema)."""
        ...

    def ping(self, location: str, timeout_s: float) -> None:
        """Raise within about `timeout_s` when the store cannot be reached; return when it can (opens nothing
        that stays open)."""
        ...


_BACKENDS: dict[str, StoreBackend] = {}  # scheme -> backend


def register_backend(backend: StoreBackend) -> None:
    """Serve `backend.schemes` with `backend`. A scheme served by another backend already is a mistake: it raises."""
    for scheme in backend.schemes:
        held = _BACKENDS.get(scheme)
        if held is not None and held is not backend:
            raise ValueError(f"store scheme {scheme!r} is already served by the {held.name!r} backend")
    for scheme in backend.schemes:
        _BACKENDS[scheme] = backend


def scheme_of(location: str | Path) -> str:
    """The URL scheme of a store setting (lower case), or `DIRECTORY` for a plain path."""
    text = str(location)
    return text.partition("://")[0].lower() if is_url(text) else DIRECTORY


def backend_for(location: str | Path) -> StoreBackend:
    """The backend that serves a store setting; `UnknownStoreScheme` naming the schemes that are served."""
    scheme = scheme_of(location)
    try:
        return _BACKENDS[scheme]
    except KeyError:
        known = sorted(f"{s}://" for s in _BACKENDS if s != DIRECTORY)
        raise UnknownStoreScheme(f"no journal store serves {scheme}:// URLs (a store is a directory or one of "
                                 f"{', '.join(known)})") from None


def registered_backends() -> list[str]:
    """The names of the registered backends, each once."""
    return sorted({b.name for b in _BACKENDS.values()})


def open_store(location: str | Path, settings: Settings | None = None) -> JournalStore:
    """The store a setting names (`Settings.store_location()`), by its backend. Pass the process's settings: a
    backend reads its own from them (None: their defaults)."""
    return backend_for(location).open(str(location), settings)


def is_shared(location: str | Path) -> bool:
    """Can processes on several nodes use the store this setting names? (The same as the opened store's `shared`.)"""
    return backend_for(location).shared


def ping(location: str | Path, timeout_s: float = 5.0) -> None:
    """Raise within about `timeout_s` when the store this setting names cannot be reached."""
    backend_for(location).ping(str(location), timeout_s)
