"""Which addresses an HTTP Effect may reach: the `http_effect_hosts` allow-list.

Public addresses are allowed by default; loopback, link-local, private and other non-global addresses only when
listed. The name is resolved here and the call then goes to that very address, so a DNS answer that changes
between the check and the connect (rebinding) cannot slip past.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_PORTED = re.compile(r"^\[?(?P<host>[^\[\]]+?)\]?:(?P<port>\d+)$")


class HostRefused(ValueError):
    """The address an HTTP Effect would use is not allowed."""


@dataclass(frozen=True)
class Entry:
    """One allow-list entry: a host name, an address or a network, optionally on one port only."""

    name: str | None
    network: IpNetwork | None
    port: int | None

    @classmethod
    def parse(cls, raw: str) -> Entry:
        text, port = raw.strip(), None
        m = _PORTED.match(text)
        if m and (text.startswith("[") or text.count(":") == 1):
            text, port = m.group("host"), int(m.group("port"))
        try:
            return cls(None, ipaddress.ip_network(text, strict=False), port)
        except ValueError:
            return cls(text.lower().rstrip("."), None, port)

    def allows(self, host: str, ip: IpAddress, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return ip.version == self.network.version and ip in self.network
        return host.lower().rstrip(".") == self.name


def _public(ip: IpAddress) -> bool:
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    return ip.is_global and not ip.is_multicast


async def resolve_checked(host: str, port: int, listed: list[str]) -> str:
    """The address to connect to for `host:port`, checked against the allow-list; raises HostRefused."""
    try:
        literal: IpAddress | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        ip = literal
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise HostRefused(f"cannot resolve HTTP Effect host {host!r}: {exc}") from None
        ip = ipaddress.ip_address(infos[0][4][0])
    entries = [Entry.parse(e) for e in listed if e.strip()]
    if _public(ip) or any(e.allows(host, ip, port) for e in entries):
        return str(ip)
    raise HostRefused(f"HTTP Effect host {host!r} resolves to {ip}, a non-public address that the "
                      f"http_effect_hosts setting does not list (JR2RAY_HTTP_EFFECT_HOSTS)")
