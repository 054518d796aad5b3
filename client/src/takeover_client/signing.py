"""Signed tool calls: how a tool proves that a request came from Takeover.

Every request Takeover sends a tool (apply, state read, effect lookup) carries::

    Takeover-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]
    X-Takeover-Action: <action id>
    Idempotency-Key: <key>            (absent when the action has none: read-only tools)

Each ``v1`` is HMAC-SHA256, keyed with the UTF-8 bytes of one of the tool's signing secrets,
over the UTF-8 bytes of these seven lines joined by ``\\n`` (no trailing newline)::

    v1
    <t, the same decimal as in the header>
    <the method, upper case>
    <the path exactly as sent on the wire: percent-encoded, no query>
    <hex SHA-256 of the raw body bytes; of b"" when there is no body>
    <the action id, as in X-Takeover-Action; "" when absent>
    <the key, bare, as in Idempotency-Key; "" when absent>

While a rotated secret's overlap lasts, Takeover signs with both, so the header carries two
``v1`` values; a verifier accepts the request when any of them matches a secret it holds.

The path is the raw one (``/effects/a%2Fb``, not ``/effects/a/b``): a tool verifies the bytes
it received, before any framework decodes or normalises them. Takeover percent-encodes every
character of a key or target outside RFC 3986's unreserved set, and a segment made only of
dots (``.``, ``..``) entirely (``%2E%2E``), so no URL library on either side collapses it.

A verifier refuses a request with no signature, a signature that matches none of its
secrets, or a timestamp more than ``tolerance`` seconds (default 300) from its own clock:
a captured request cannot be played again later.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from urllib.parse import quote

SIGNATURE_HEADER = "Takeover-Signature"
ACTION_HEADER = "X-Takeover-Action"
KEY_HEADER = "Idempotency-Key"
TOLERANCE_SECONDS = 300
SCHEME = "v1"


class SignatureError(Exception):
    """The request is not provably from Takeover; ``str()`` says why, in words."""


def segment(value: str) -> str:
    """One path segment, exactly as meant: every character outside the unreserved set is
    percent-encoded, and a segment of dots only is encoded whole (``..`` -> ``%2E%2E``)."""
    if value and set(value) == {"."}:
        return "%2E" * len(value)
    return quote(value, safe="")


def signed_string(
    *, timestamp: int | str, method: str, path: str, body: bytes, action_id: str, key: str
) -> bytes:
    """The bytes a ``v1`` signature covers (see the module's docstring)."""
    digest = hashlib.sha256(body or b"").hexdigest()
    lines = [SCHEME, str(timestamp), method.upper(), path, digest, action_id or "", key or ""]
    return "\n".join(lines).encode()


def _mac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(
    secrets: str | Iterable[str],
    *,
    method: str,
    path: str,
    body: bytes = b"",
    action_id: str = "",
    key: str = "",
    timestamp: int | None = None,
) -> str:
    """The ``Takeover-Signature`` value for one request, signed with every secret given."""
    if isinstance(secrets, str):
        secrets = [secrets]
    t = int(time.time()) if timestamp is None else int(timestamp)
    message = signed_string(
        timestamp=t, method=method, path=path, body=body, action_id=action_id, key=key
    )
    macs = [f"{SCHEME}={_mac(s, message)}" for s in secrets if s]
    if not macs:
        raise ValueError("sign() needs at least one secret")
    return ",".join([f"t={t}", *macs])


def parse(header: str) -> tuple[int, list[str]]:
    """``(timestamp, [v1 signatures])`` from a header value; SignatureError when malformed."""
    timestamp = None
    signatures = []
    for part in (header or "").split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif name == SCHEME and value:
            signatures.append(value)
    if timestamp is None or not signatures:
        raise SignatureError(f"{SIGNATURE_HEADER} is malformed: it needs t= and at least one v1=.")
    return timestamp, signatures


def verify(
    secrets: str | Iterable[str],
    *,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    now: float | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> None:
    """Return quietly when the request is signed by Takeover with one of ``secrets``;
    raise SignatureError otherwise. ``headers`` is looked up case-insensitively."""
    lowered = {k.lower(): v for k, v in headers.items()}
    header = lowered.get(SIGNATURE_HEADER.lower())
    if not header:
        raise SignatureError(f"The request carries no {SIGNATURE_HEADER} header.")
    timestamp, given = parse(header)
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > tolerance:
        raise SignatureError(
            f"The signature's timestamp is {abs(int(age))} s from this server's clock "
            f"(at most {tolerance} s allowed): a late or replayed request."
        )
    message = signed_string(
        timestamp=timestamp,
        method=method,
        path=path,
        body=body,
        action_id=lowered.get(ACTION_HEADER.lower(), ""),
        key=lowered.get(KEY_HEADER.lower(), ""),
    )
    if isinstance(secrets, str):
        secrets = [secrets]
    expected = [_mac(s, message) for s in secrets if s]
    if not any(hmac.compare_digest(e, g) for e in expected for g in given):
        raise SignatureError("The signature matches none of this tool's secrets.")
