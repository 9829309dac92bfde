"""Keep a loopback Ray address loopback.

Ray swaps 127.0.0.1 for the machine's routable address wherever it meets one (a `ray start --node-ip-address`, a
driver's `ray.init(address="127.0.0.1:port")`), so that other machines could reach it. A single-machine jr2ray head
listens on loopback only (see `jr2ray.cli.raystart`); its head and every driver that joins it must then keep
127.0.0.1 as given, or they would look for the GCS on an address where nothing listens.
"""

from __future__ import annotations

import ipaddress


def is_loopback_address(address: str | None) -> bool:
    """True for "127.0.0.1:6379", "localhost:6379", "[::1]:6379"."""
    if not address:
        return False
    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def keep_loopback() -> None:
    """Make Ray keep a loopback address instead of swapping in the routable one (idempotent)."""
    from ray._private import services

    resolve = getattr(services.resolve_ip_for_localhost, "jr2ray_wrapped", services.resolve_ip_for_localhost)

    def kept(host: str) -> str:
        return host if services.is_localhost(host) else resolve(host)

    kept.jr2ray_wrapped = resolve  # type: ignore[attr-defined]
    services.resolve_ip_for_localhost = kept
