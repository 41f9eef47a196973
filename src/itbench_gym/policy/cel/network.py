"""Kubernetes' URL, IP and CIDR CEL libraries (k8s.io/apiserver/pkg/cel/library: url.go, ip.go, cidr.go).

``url(s)`` takes what Go's ``url.ParseRequestURI`` takes (an absolute URI or an absolute path);
``ip(s)`` an IPv4 or IPv6 address without a zone and not IPv4-mapped; ``cidr(s)`` an address and a
prefix length (the address need not be the network's). Each method takes its receiver first, as
cel-python calls methods; ``ip`` and ``string`` of a CIDR or an IP dispatch on the receiver.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from celpy import celtypes

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class URL:
    """A parsed URL (``url("https://example.com:80/a?b=c")``)."""

    __slots__ = ("parts", "text")

    def __init__(self, text: str) -> None:
        if not (text.startswith("/") or _SCHEME.match(text)):
            raise ValueError(f"URL parse error during conversion from string: parse {text!r}: invalid URI for request")
        self.text, self.parts = text, urlsplit(text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, URL) and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)


class IP:
    """An IP address (``ip("10.0.0.1")``)."""

    __slots__ = ("address",)

    def __init__(self, address: IPAddress) -> None:
        self.address = address

    @classmethod
    def parse(cls, text: str) -> IP:
        if "%" in text:
            raise ValueError(f"IP address with zone value is not allowed: {text}")
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            raise ValueError(f"IP Address {text!r} parse error during conversion from string: ParseAddr({text!r}): invalid IP address") from None
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            raise ValueError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
        return cls(address)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IP) and self.address == other.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __str__(self) -> str:
        return str(self.address)


class CIDR:
    """An address with a prefix length (``cidr("10.0.0.0/8")``)."""

    __slots__ = ("address", "network")

    def __init__(self, text: str) -> None:
        address, slash, length = text.partition("/")
        if not slash or not length.isdigit():
            raise ValueError(f"network address parse error during conversion from string: netip.ParsePrefix({text!r}): no '/'")
        self.address = IP.parse(address).address
        try:
            self.network = ipaddress.ip_network(f"{self.address}/{length}", strict=False)
        except ValueError:
            raise ValueError(f"network address parse error during conversion from string: netip.ParsePrefix({text!r}): bad bits") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CIDR) and (self.address, self.network) == (other.address, other.network)

    def __hash__(self) -> int:
        return hash((self.address, self.network))

    def __str__(self) -> str:
        return f"{self.address}/{self.network.prefixlen}"


def _ip_of(value: Any) -> IP:
    if isinstance(value, IP):
        return value
    if isinstance(value, str):
        return IP.parse(str(value))
    raise TypeError("no such overload: expected an IP or a string")


def _cidr_of(value: Any) -> CIDR:
    if isinstance(value, CIDR):
        return value
    if isinstance(value, str):
        return CIDR(str(value))
    raise TypeError("no such overload: expected a CIDR or a string")


def _ip(value: Any) -> IP:
    """``ip(string)``, and ``cidr.ip()``: the CIDR's own address."""
    if isinstance(value, CIDR):
        return IP(value.address)
    if isinstance(value, str):
        return IP.parse(str(value))
    raise TypeError("no such overload: ip() takes a string or a CIDR")


def _valid(parse: Callable[[str], Any]) -> Callable[[Any], celtypes.BoolType]:
    def check(text: Any) -> celtypes.BoolType:
        try:
            parse(str(text))
        except ValueError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)
    return check


def _url(value: Any) -> URL:
    if not isinstance(value, URL | str):
        raise TypeError("no such overload: expected a URL")
    return value if isinstance(value, URL) else URL(str(value))


def _port(u: Any) -> celtypes.StringType:
    netloc = _url(u).parts.netloc.rpartition("@")[2]
    host, colon, port = netloc.rpartition(":")
    return celtypes.StringType(port if colon and not port.endswith("]") and (not host.startswith("[") or host.endswith("]")) else "")


def _hostname(u: Any) -> celtypes.StringType:
    netloc = _url(u).parts.netloc.rpartition("@")[2]
    if netloc.startswith("["):
        return celtypes.StringType(netloc[1:netloc.find("]")])
    return celtypes.StringType(netloc.rpartition(":")[0] if ":" in netloc else netloc)


def _query(u: Any) -> celtypes.MapType:
    found = parse_qs(_url(u).parts.query, keep_blank_values=True)
    return celtypes.MapType({celtypes.StringType(k): celtypes.ListType([celtypes.StringType(v) for v in vs]) for k, vs in found.items()})


def with_string_of_addresses(string: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``string()`` that also takes an IP or a CIDR (the engine's own takes the rest)."""
    return lambda value: celtypes.StringType(str(value)) if isinstance(value, IP | CIDR) else string(value)


def _contains(outer: CIDR, inner: CIDR) -> bool:
    a, b = outer.network, inner.network
    return a.version == b.version and b.prefixlen >= a.prefixlen and b.network_address in a


def functions() -> dict[str, Callable[..., Any]]:
    """The libraries' functions and methods, by the name CEL calls them."""
    def test(pred: Callable[[ipaddress.IPv4Address | ipaddress.IPv6Address], bool]) -> Callable[[Any], celtypes.BoolType]:
        return lambda value: celtypes.BoolType(pred(_ip_of(value).address))

    return {
        "url": _url, "isURL": _valid(URL),
        "getScheme": lambda u: celtypes.StringType(_url(u).parts.scheme),
        "getHost": lambda u: celtypes.StringType(_url(u).parts.netloc.rpartition("@")[2]),
        "getHostname": _hostname, "getPort": _port,
        "getEscapedPath": lambda u: celtypes.StringType(quote(_url(u).parts.path, safe="/:@!$&'()*+,;=-._~")),
        "getQuery": _query,
        "ip": _ip, "isIP": _valid(IP.parse),
        "family": lambda value: celtypes.IntType(_ip_of(value).address.version),
        "isUnspecified": test(lambda a: a.is_unspecified), "isLoopback": test(lambda a: a.is_loopback),
        "isLinkLocalMulticast": test(lambda a: a.is_multicast and a.is_link_local if a.version == 6
                                     else a in ipaddress.ip_network("224.0.0.0/24")),
        "isLinkLocalUnicast": test(lambda a: a.is_link_local and not a.is_multicast),
        "isGlobalUnicast": test(lambda a: not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)
                                and a != ipaddress.IPv4Address("255.255.255.255")),
        "cidr": _cidr_of, "isCIDR": _valid(CIDR),
        "containsIP": lambda c, value: celtypes.BoolType(_ip_of(value).address in _cidr_of(c).network),
        "containsCIDR": lambda c, other: celtypes.BoolType(_contains(_cidr_of(c), _cidr_of(other))),
        "masked": lambda c: _cidr_of(str(_cidr_of(c).network)),
        "prefixLength": lambda c: celtypes.IntType(_cidr_of(c).network.prefixlen),
    }

