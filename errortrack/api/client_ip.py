"""The client's address, as far as it can be trusted: for the login throttle's key.

Behind a reverse proxy or a load balancer every request comes from the proxy's address:
keyed on that, five wrong passwords from anyone locked the user out for everyone. The
proxy says who its client was in ``X-Forwarded-For``, which it appends to; but a client
can send that header too, so it is believed only from the proxies the operator names in
``ERRORTRACK_TRUSTED_PROXIES`` (addresses or CIDR networks; empty, the default, trusts
none and the header is ignored).

The client is the rightmost ``X-Forwarded-For`` address that is not itself a trusted
proxy, read from the right while each hop is trusted: the entries left of it were written
by whoever sent the request, and could say anything. Only ``X-Forwarded-For`` is read
(the header nginx, HAProxy, Traefik, Caddy and cloud load balancers write), not RFC
7239 ``Forwarded``: reading two headers would let a client pick the one its proxy does not
rewrite.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # config.py parses the setting with this module: no falcon import there
    import falcon

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_HELP = "expected IP addresses or CIDR networks separated by commas, e.g. 10.0.0.0/8,192.0.2.7"


def parse_trusted_proxies(raw: str) -> tuple[Network, ...]:
    """``ERRORTRACK_TRUSTED_PROXIES``: "" (trust none) or comma-separated addresses and
    networks. Raises ValueError (one line) for anything else."""
    if not raw.strip():
        return ()
    networks = []
    for item in raw.split(","):
        text = item.strip()
        if not text:
            raise ValueError(f"{_HELP} (an entry is empty)")
        try:
            # strict: "10.0.0.1/8" (host bits set) is a typo for an address or a network,
            # and a typo in what is trusted should not silently widen it.
            network = ipaddress.ip_network(text, strict=True)
        except ValueError:
            try:
                meant = ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise ValueError(f"{_HELP}; not one: {text[:60]!r}") from None
            raise ValueError(
                f"{text} has host bits set: write the network ({meant}) or the address"
            ) from None
        if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_MAPPED):
            # "::ffff:10.0.0.5" is how a dual-stack socket shows an IPv4 peer (and so the
            # logs); peers are compared in their IPv4 form (``_address``), which an IPv6
            # network never contains: the entry was taken and matched nothing.
            network = ipaddress.IPv4Network(
                (int(network.network_address) & 0xFFFFFFFF, network.prefixlen - 96)
            )
        if network.prefixlen == 0:
            # Every address trusted: any client could then name its own address.
            raise ValueError(f"{text} trusts every address, which lets any client choose its own")
        networks.append(network)
    return tuple(networks)


def _address(text: str) -> Address | None:
    """An address as proxies write it: bare, or with a port (``1.2.3.4:5``,
    ``[2001:db8::1]:5``); None when it is none (``unknown``, an obfuscated name, junk)."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d; the operator
    # writes its IPv4 form.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address in network for network in trusted)


def resolve(peer: str, forwarded_for: str | None, trusted: Sequence[Network]) -> str:
    """The client address, given the socket peer and the ``X-Forwarded-For`` value (its
    header lines joined with commas, in order)."""
    current = _address(peer)
    if current is None or not trusted or not _trusted(current, trusted):
        return peer
    for hop in reversed((forwarded_for or "").split(",")):
        if not hop.strip():
            continue
        address = _address(hop)
        if address is None:
            # A trusted proxy passed on something that is not an address: whatever is
            # further left is unverifiable, so the last trusted hop stands for its
            # clients (they share a lockout rather than choose their own).
            break
        current = address
        if not _trusted(address, trusted):
            break
    # Every hop trusted (or no header): the furthest known one.
    return str(current)


class ProxyAddress(str):
    """The key of a proxy's address that stands for every client behind it, none of them
    named in a way that can be believed: the login throttle keeps its per-address budget
    off it (``auth/throttle.py``), as that would let one client lock every login out. A
    str like any key (equal to, and hashed as, the plain address), so the lockout per
    (email, address) is unchanged."""

    __slots__ = ()


# Headers that proxies add to name their client (X-Real-IP: nginx setups; Forwarded: RFC
# 7239). Not believed here: their presence only says that the peer is a proxy.
_FORWARDING = ("X-Forwarded-For", "Forwarded", "X-Real-IP")


def client_address(req: falcon.Request, trusted: Sequence[Network]) -> str:
    """The request's client as the login throttle keys it (see the module's docstring):
    its address, or for IPv6 its /64 (``client_key``). A :class:`ProxyAddress` when it
    is a proxy's that names no client we believe: a listed proxy with no client in
    ``X-Forwarded-For``, or an unlisted peer that sends a forwarding header (a proxy in
    front while ``ERRORTRACK_TRUSTED_PROXIES`` is not set, or a client pretending to
    be one, which escapes no more than the per-address budget), or a peer that is no
    address at all (a Unix socket's, which only a local proxy connects to)."""
    peer = req.remote_addr or ""
    found = _address(peer)
    if found is None:
        return ProxyAddress(client_key(peer))
    if not trusted or not _trusted(found, trusted):
        key = client_key(peer)
        if any(req.get_header(name) is not None for name in _FORWARDING):
            return ProxyAddress(key)
        return key
    resolved = resolve(peer, req.get_header("X-Forwarded-For"), trusted)
    client = _address(resolved)
    if client is None or _trusted(client, trusted):
        return ProxyAddress(client_key(resolved))
    return client_key(resolved)


def client_key(address: str) -> str:
    """An IPv4 address as it is; an IPv6 one as its /64 network: one host is usually
    given a whole /64, and keyed on each address, 100 wrong guesses from 20 of its
    addresses met no lockout (security review, thirtieth session). Anything else (a
    Unix socket's empty peer) as it is."""
    found = _address(address)
    if not isinstance(found, ipaddress.IPv6Address):
        return address if found is None else str(found)
    if found in _NAT64:
        # An IPv4 client through a translator (RFC 6052's well-known prefix): one client
        # per IPv4 address, not every IPv4 client in one /64 (diff review).
        return str(ipaddress.IPv4Address(int(found) & 0xFFFFFFFF))
    if any(found in network for network in _WHOLE):
        return str(found)
    return str(ipaddress.IPv6Network((found, 64), strict=False))


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Prefixes whose /64 is shared by unrelated clients: IPv4-compatible addresses (and ::1),
# Teredo (a /64 per Teredo server), the local-use NAT64 prefix (RFC 8215, the IPv4
# address placed by the operator's chosen prefix length). Keyed whole.
_WHOLE = (
    ipaddress.IPv6Network("::/96"),
    ipaddress.IPv6Network("2001::/32"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
)
