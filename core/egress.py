"""Egress policy (docs/design.md, "The tool protocol"): where Takeover may send a tool call.

A tenant admin chooses a tool's `base_url`, and Takeover then POSTs to it and shows the
operator part of the answer: without a policy that is a server-side request forgery
primitive aimed at whatever the web and worker machines can reach (the database's admin
port, a cloud metadata service, an internal dashboard). So:

1. **Shape** (`validate_base_url`): an absolute `http`/`https` URL with a host, and no
   user-info, query or fragment, because Takeover appends `/effects` and `/state/{target}`
   and a `?` or `#` would turn those into a query or fragment of some other URL.
2. **Destination** (`check_destination`, at registration): the host must be allowed by
   `TOOL_URL_ALLOWLIST`: comma-separated host names (`tools.acme.com`), `*.domain`
   wildcards (`*.tools.acme.com`: any name below it, not the domain itself) and CIDR
   ranges or single addresses (`10.20.0.0/16`, `192.0.2.7`, `fd00::/8`). Default: loopback
   only (`localhost,127.0.0.0/8,::1`), so a single machine works and nothing else on the
   network is reachable until the deployer says so.
3. **Connect time** (`egress_transport` under `egress_client`; `_connectable` under
   `tool_request`): the address a name *resolves to when we connect* is checked again, and
   the connection is made to that checked address (the TLS name stays the host name). A
   name that passed at registration and later resolves somewhere else (DNS rebinding) is
   refused. A refusal is raised as a connect error before a byte is written, so the
   dispatcher classifies it as "not sent": an action whose tool became disallowed fails
   `not_sent`.

The rule for one resolved address of a host:
- an *inward* address — link-local (169.254.0.0/16, fe80::/10: cloud metadata), loopback
  (127.0.0.0/8, ::1) or unspecified (0.0.0.0, ::) — is allowed only by a CIDR entry that
  lies inside its own class (`127.0.0.0/8`, `::1`, `169.254.169.254/32`), never by a broad
  range such as `0.0.0.0/0` or `::/0`; and a loopback address also by the name entry
  `localhost` when the host is `localhost` (the name means loopback, RFC 6761: listing it
  says so, and it vouches for nothing else);
- otherwise, inside a CIDR entry → allowed;
- otherwise, the host name matches a name or wildcard entry → allowed, unless the address
  is multicast or reserved (a trusted name does not vouch for where its DNS points inward);
- an IP-literal host is judged by the CIDR entries alone.

Quirks: a name that matches no name entry is resolved at registration and accepted if
all its addresses are allowed; a name matching a name entry is not resolved then (DNS may
differ between the web and the workers), only at connect time. An invalid allowlist entry
stops the process at start-up (a Django system check), never at the first call.
"""

from __future__ import annotations

import http.cookiejar
import ipaddress
import logging
import socket
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from . import keptalive, otel
from .errors import ValidationFailed

# The line httpx's Client writes for each request, kept for tool calls made without it, so
# that a tool call is still logged under its request and action ids where operators look.
http_log = logging.getLogger("httpx")

DEFAULT_ALLOWLIST = "localhost,127.0.0.0/8,::1"

LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
# Addresses that point back inside: each class is allowed only by an entry within it.
INWARD = {
    "link-local": LINK_LOCAL,
    "loopback": (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")),
    "unspecified": (ipaddress.ip_network("0.0.0.0/32"), ipaddress.ip_network("::/128")),
}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(Exception):
    """A destination the policy does not allow."""


@dataclass(frozen=True)
class Allowlist:
    names: frozenset[str]
    suffixes: tuple[str, ...]  # ".tools.acme.com" for "*.tools.acme.com"
    networks: tuple[Network, ...]

    def name_listed(self, host: str) -> bool:
        host = _normal_name(host)
        return host in self.names or any(host.endswith(s) for s in self.suffixes)

    def address_allowed(self, ip: Address, *, host: str | None = None) -> bool:
        ip = _unmapped(ip)
        if (inward := _inward_class(ip)) is not None:
            # Only an entry inside the class itself counts, never 0.0.0.0/0 and the like.
            if any(ip in net and _within(net, INWARD[inward]) for net in self.networks):
                return True
            return (
                inward == "loopback"
                and host is not None
                and _normal_name(host) == "localhost"
                and "localhost" in self.names
            )
        if any(ip in net for net in self.networks if net.version == ip.version):
            return True
        if host is not None and self.name_listed(host):
            # `localhost` vouches for loopback only: anywhere else it points was not meant.
            localhost = _normal_name(host) == "localhost"
            return not (ip.is_multicast or ip.is_reserved or localhost)
        return False


def _normal_name(host: str) -> str:
    host = host.strip().rstrip(".").lower()
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def _unmapped(ip: Address) -> Address:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_link_local(ip: Address) -> bool:
    return any(ip in net for net in LINK_LOCAL if net.version == ip.version)


def _inward_class(ip: Address) -> str | None:
    for name, nets in INWARD.items():
        if any(ip in net for net in nets if net.version == ip.version):
            return name
    return None


def _within(net: Network, nets) -> bool:
    return any(net.subnet_of(n) for n in nets if n.version == net.version)


def parse_allowlist(text: str) -> Allowlist:
    """Parse TOOL_URL_ALLOWLIST; ImproperlyConfigured names the bad entry."""
    names, suffixes, networks = set(), [], []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        name = entry[2:] if entry.startswith("*.") else entry
        label_ok = all(
            0 < len(label) <= 63 and all(c.isalnum() or c == "-" for c in label)
            for label in _normal_name(name).split(".")
        )
        if not label_ok or "*" in name:
            raise ImproperlyConfigured(
                f"TOOL_URL_ALLOWLIST: {entry!r} is neither a host name, a *.domain wildcard "
                "nor an address or CIDR range."
            )
        if entry.startswith("*."):
            suffixes.append("." + _normal_name(name))
        else:
            names.add(_normal_name(name))
    return Allowlist(frozenset(names), tuple(suffixes), tuple(networks))


@lru_cache(maxsize=8)
def _parsed(text: str) -> Allowlist:
    return parse_allowlist(text)


def allowlist() -> Allowlist:
    """The allowlist in force (settings.TOOL_URL_ALLOWLIST, parsed once per value)."""
    return _parsed(getattr(settings, "TOOL_URL_ALLOWLIST", DEFAULT_ALLOWLIST))


# --- registration ------------------------------------------------------------------------


def _bad(message: str) -> ValidationFailed:
    return ValidationFailed("The tool's base_url is not allowed.", {"base_url": [message]})


def validate_base_url(url: str) -> str:
    """The shape rules, then the destination rules; returns the URL unchanged.

    Raises ValidationFailed naming `base_url`.
    """
    if not isinstance(url, str) or not url:
        raise _bad("Must be an absolute http or https URL.")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise _bad("Must not contain spaces or control characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _bad(f"Not a valid URL: {exc}.") from exc
    if parts.scheme.lower() not in {"http", "https"} or not parts.netloc:
        raise _bad("Must be an absolute http or https URL.")
    if "@" in parts.netloc:
        raise _bad("Must not contain user-info (user:password@).")
    # An empty "?" or "#" is enough to turn the appended /effects into a query or fragment.
    if "?" in url:
        raise _bad("Must not contain a query (?...): Takeover appends /effects and /state/….")
    if "#" in url:
        raise _bad("Must not contain a fragment (#...): Takeover appends /effects and /state/….")
    if not parts.hostname:
        raise _bad("Must name a host.")
    if port == 0:
        raise _bad("Port 0 is not a destination.")
    check_destination(parts.hostname, port or (443 if parts.scheme.lower() == "https" else 80))
    return url


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def check_destination(host: str, port: int) -> None:
    """Registration-time destination check (see the module docstring)."""
    rules = allowlist()
    hint = "Ask the deployer to add it to TOOL_URL_ALLOWLIST."
    if (ip := _literal(host)) is not None:
        if (inward := _inward_class(_unmapped(ip))) and not rules.address_allowed(ip):
            what = "link-local (cloud metadata)" if inward == "link-local" else inward
            raise _bad(
                f"{ip} is {what}; refused unless TOOL_URL_ALLOWLIST lists it on its own "
                "(a broad range such as 0.0.0.0/0 does not)."
            )
        if not rules.address_allowed(ip):
            raise _bad(f"{ip} is outside TOOL_URL_ALLOWLIST. {hint}")
        return
    if rules.name_listed(host):
        return
    try:
        addresses = _resolve(host, port)
    except EgressRefused as exc:
        raise _bad(f"{host} is not in TOOL_URL_ALLOWLIST and {exc}. {hint}") from exc
    refused = [str(a) for a in addresses if not rules.address_allowed(a, host=host)]
    if refused:
        raise _bad(f"{host} resolves to {', '.join(refused)}, outside TOOL_URL_ALLOWLIST. {hint}")


def _resolve(host: str, port: int) -> list[Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise EgressRefused(f"could not be resolved ({exc})") from exc
    seen: list[Address] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        ip = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        if ip not in seen:
            seen.append(ip)
    return seen


# --- connect time ------------------------------------------------------------------------


def allowed_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to now that the policy allows, to connect to by address
    (so the address checked is the address used); EgressRefused in words otherwise."""
    rules = allowlist()
    literal = _literal(host)
    try:
        addresses = [literal] if literal is not None else _resolve(host, port)
    except EgressRefused as exc:
        raise EgressRefused(f"{host}: {exc}") from exc
    allowed = [str(_unmapped(ip)) for ip in addresses if rules.address_allowed(ip, host=host)]
    if not allowed:
        raise EgressRefused(
            f"egress refused: {host} ({', '.join(map(str, addresses))}) is not allowed by "
            "TOOL_URL_ALLOWLIST"
        )
    return allowed


def _connectable(host: str, port: int) -> list[str]:
    """`allowed_addresses`, a refusal as httpx's connect error (provably not sent)."""
    try:
        return allowed_addresses(host, port)
    except EgressRefused as exc:
        raise httpx.ConnectError(str(exc)) from exc


class EgressBackend(httpcore.NetworkBackend):
    """httpcore's network backend, with the policy applied to the resolved address.

    httpcore hands us the host name; we resolve it ourselves, keep only the allowed
    addresses and connect to one of those by address, so the address checked is the
    address used. TLS still verifies the host name (httpcore passes it to start_tls
    separately). A refusal is an httpcore.ConnectError: raised before any byte of the
    request is written, which is exactly what "not sent" means to the dispatcher.
    """

    def __init__(self, inner: httpcore.NetworkBackend | None = None):
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            allowed = allowed_addresses(host, port)
        except EgressRefused as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        last: Exception | None = None
        for ip in allowed:
            try:
                return self._inner.connect_tcp(
                    ip,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:  # try the next allowed address
                last = exc
            except httpcore.ConnectTimeout as exc:
                last = exc
        assert last is not None
        raise last

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("egress refused: Unix sockets are not tool destinations")

    def sleep(self, seconds):
        self._inner.sleep(seconds)


def egress_transport(limits: httpx.Limits | None = None) -> httpx.HTTPTransport:
    """An httpx transport that connects only where the egress policy allows.

    Default limits: no keep-alive, so every request opens a fresh connection (and so is
    checked again, and a ConnectError still proves "never sent")."""
    transport = httpx.HTTPTransport(
        retries=0,
        limits=limits or httpx.Limits(max_connections=None, max_keepalive_connections=0),
    )
    # httpx does not expose httpcore's network_backend; the pool reads this attribute on
    # every new connection (httpx and httpcore are pinned; tests/core/test_egress.py proves
    # the refusal end to end).
    transport._pool._network_backend = EgressBackend()
    return transport


USER_AGENT = f"python-httpx/{httpx.__version__}"


def tool_request(
    method: str,
    url: httpx.URL,
    *,
    headers: dict,
    content: bytes | None = None,
    timeout: float,
    reuse: bool = False,
) -> httpx.Response:
    """One request to a tool on the standard library's HTTP/1.1 client (core/keptalive.py:
    about half the CPU of httpx's transport), its answer read whole (httpx errors
    propagate: the caller classifies them): on a fresh connection, closed after its answer,
    or with `reuse` (a call with no side effect) on a kept-alive one. The egress policy is
    applied at connect time (`_connectable`); a refused or failed connect is
    `httpx.ConnectError`, provably not sent. No redirect is followed, no cookie kept, no
    proxy from the environment used."""
    headers = {"User-Agent": USER_AGENT, **headers}
    with otel.tool_call_span(method, url, headers) as answered:
        response = keptalive.request(
            method,
            url,
            headers=headers,
            content=content,
            timeout=timeout,
            allowed=_connectable,
            reuse=reuse,
        )
        answered(response.status_code)
    if http_log.isEnabledFor(logging.INFO):
        http_log.info(
            'HTTP Request: %s %s "%s %d %s"',
            method,
            url,
            response.http_version,
            response.status_code,
            response.reason_phrase,
        )
    return response


def egress_client(timeout: float | None = None, *, limits: httpx.Limits | None = None):
    """The only way Takeover should talk to a tool. Thread-safe; one per process is enough
    (pass the tool's timeout per request, or here as the default).

    trust_env=False: no proxy from the environment may sit between us and the tool (it
    would also bypass the connect-time check). Redirects are not followed: a 3xx is the
    tool's answer, never a way to point us elsewhere. No cookie jar: what a tool sets is
    never sent to anyone.
    """
    return httpx.Client(
        timeout=httpx.Timeout(timeout) if timeout is not None else httpx.Timeout(10.0),
        transport=egress_transport(limits),
        trust_env=False,
        follow_redirects=False,
        cookies=NO_COOKIES,
    )


class _NoCookies(http.cookiejar.CookieJar):
    """Keeps no cookie: a client serves every tenant's tools, so a cookie one tool sets must
    never ride along on a call to another (of another tenant, on the same host)."""

    def set_cookie(self, cookie):
        pass

    def extract_cookies(self, response, request):
        pass


NO_COOKIES = _NoCookies()
