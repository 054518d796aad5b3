"""Delivering notifications (the workers' side): signed requests, Slack's format and
e-mail, leased from the outbox like actions are (`core.queue`), at least once.

Signing (webhook and Slack channels; the scheme is documented for receivers in the README):
`X-Takeover-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>`, with the
Unix time in `X-Takeover-Timestamp`. A receiver recomputes the HMAC over the exact bytes it
received, compares in constant time, refuses a timestamp more than 5 minutes from its clock
(a captured request cannot be replayed later), and keeps the event ids it has seen for that
long (a request replayed within the window is a duplicate). Each attempt is signed afresh
with its own timestamp; the body, and the event id in it, stay the same.

Quirks: the lease takes the oldest due rows first, not fairly per tenant (a tenant with a
broken receiver retries with backoff, so it cannot hold the pool for long); the body is
built at delivery time from what the event recorded at emission.
"""

import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import queue
from core.audit import Actor
from core.models import Tenant
from core.perprocess import PerProcess

from .kinds import KINDS
from .models import (
    ChannelKind,
    DeliveryAttempt,
    DeliveryState,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
)
from .services import delivery_move

logger = logging.getLogger(__name__)

NOTIFIER = Actor("system", "notifier")
SIGNATURE_HEADER = "X-Takeover-Signature"
TIMESTAMP_HEADER = "X-Takeover-Timestamp"
SIGNATURE_TOLERANCE_SECONDS = 300


# --- signing ----------------------------------------------------------------------------------


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for `body` sent at `timestamp` (Unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def verify(secret: str, *, timestamp: str, signature: str, body: bytes, now=None) -> bool:
    """What a receiver does (README, "Verifying a webhook"): the timestamp is recent and
    one of the `v1=` signatures matches. Several are allowed, comma-separated."""
    try:
        sent = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - sent) > SIGNATURE_TOLERANCE_SECONDS:
        return False
    expected = sign(secret, sent, body)
    return any(hmac.compare_digest(expected, s.strip()) for s in (signature or "").split(","))


# --- what goes over the wire --------------------------------------------------------------------


def link(path: str) -> str:
    return settings.CONSOLE_URL.rstrip("/") + path if path else ""


def webhook_body(event: NotificationEvent, tenant: Tenant) -> dict:
    return {
        "id": str(event.pk),
        "type": event.kind,
        "tenant": tenant.slug,
        "created_at": event.at.isoformat(),
        "summary": event.summary,
        "url": link(event.path),
        "data": event.data,
    }


def slack_body(event: NotificationEvent, tenant: Tenant) -> dict:
    """Slack's incoming-webhook format (also understood by Mattermost, Rocket.Chat and
    others): `text` for notifications and clients without blocks, and one section."""
    label = KINDS[event.kind].label if event.kind in KINDS else "Test"
    url = link(event.path)
    text = f"*{label}* ({tenant.slug}): {event.summary}"
    if url:
        text += f" <{url}|Open in Takeover>"
    return {
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }


def email_message(event: NotificationEvent, tenant: Tenant) -> tuple[str, str]:
    label = KINDS[event.kind].label if event.kind in KINDS else "Test notification"
    subject = f"[Takeover {tenant.slug}] {label}"
    lines = [event.summary, ""]
    if url := link(event.path):
        lines += [f"Open it in the console: {url}", ""]
    lines += [f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in event.data.items()]
    lines += ["", "You get this because you asked for it in your Takeover preferences."]
    return subject, "\n".join(lines)


# --- delivering (the workers) -------------------------------------------------------------------

DUE = """
SELECT id FROM core_notificationdelivery
WHERE state = 'pending' AND next_attempt_at <= %(now)s {only}
ORDER BY next_attempt_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""


def lease_for() -> timedelta:
    """The longest one attempt can take, plus grace."""
    return timedelta(seconds=settings.NOTIFY_TIMEOUT_SECONDS + settings.NOTIFY_LEASE_GRACE_SECONDS)


def lease_deliveries(limit: int, *, only=None) -> list[int]:
    """Lease up to `limit` due deliveries (of `only`, when given): `next_attempt_at` is
    pushed past the longest an attempt can take, in the lease's own transaction, so no
    second worker sends the same row meanwhile. Returns their ids, oldest due first."""
    if limit <= 0:
        return []
    now = timezone.now()
    params = {"now": now, "limit": limit, "only": list(only or [])}
    return queue.lease(
        DUE.format(only="AND id = ANY(%(only)s)" if only else ""),
        params,
        hold=lambda ids: NotificationDelivery.objects.filter(pk__in=ids).update(
            next_attempt_at=now + lease_for()
        ),
    )


def backoff(attempt: int) -> timedelta:
    """After the n-th failed attempt: base, 2 × base, 4 × base, …, capped."""
    seconds = settings.NOTIFY_BACKOFF_BASE_SECONDS * 2 ** max(attempt - 1, 0)
    return timedelta(seconds=min(seconds, settings.NOTIFY_BACKOFF_MAX_SECONDS))


@dataclass
class Sent:
    ok: bool
    status: int | None = None
    detail: str = ""
    give_up: bool = False


def _client() -> httpx.Client:
    from core.egress import egress_client

    return egress_client(limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))


_http = PerProcess(_client)


def http_client() -> httpx.Client:
    """The egress policy's client (`core/egress.py`): only allowed destinations, the resolved
    address checked at every connection (no DNS rebinding), no proxy from the environment,
    no redirects (a 3xx is the receiver's answer, never a way to send us elsewhere), no
    keep-alive. Thread-safe; one per process (a forked child builds its own)."""
    return _http.get()


def _post(channel: NotificationChannel, delivery, body: dict) -> Sent:
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Takeover-Notifications/1",
        "X-Takeover-Event": delivery.event.kind,
        "X-Takeover-Event-Id": str(delivery.event_id),
        "X-Takeover-Delivery": str(delivery.pk),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(channel.secret, timestamp, raw),
    }
    try:
        response = http_client().post(
            channel.url, content=raw, headers=headers, timeout=settings.NOTIFY_TIMEOUT_SECONDS
        )
    except httpx.HTTPError as exc:
        # The egress policy refused the destination at connect time: no retry will change
        # that (the deployer's TOOL_URL_ALLOWLIST does), so it is given up at once.
        refused = "egress refused" in str(exc)
        return Sent(False, detail=f"{type(exc).__name__}: {exc}"[:300], give_up=refused)
    ok = 200 <= response.status_code < 300
    return Sent(ok, response.status_code, response.text[:300])


def _send(delivery: NotificationDelivery) -> Sent:
    channel, event, tenant = delivery.channel, delivery.event, delivery.tenant
    if not channel.enabled:
        return Sent(False, detail="the channel was switched off", give_up=True)
    if channel.kind == ChannelKind.WEBHOOK:
        return _post(channel, delivery, webhook_body(event, tenant))
    if channel.kind == ChannelKind.SLACK:
        return _post(channel, delivery, slack_body(event, tenant))
    from django.core.mail import send_mail

    subject, text = email_message(event, tenant)
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [delivery.recipient])
    except Exception as exc:  # SMTP errors, refused connections, a bad address: retried
        return Sent(False, detail=f"{type(exc).__name__}: {exc}"[:300])
    return Sent(True, detail=f"accepted by {settings.EMAIL_BACKEND.rsplit('.', 2)[-2]}")


def deliver_leased(delivery_id) -> str:
    """Send one leased delivery (no transaction or lock open meanwhile) and record how it
    went. Returns the delivery's state afterwards."""
    delivery = (
        NotificationDelivery.objects.select_related("channel", "event", "tenant")
        .filter(pk=delivery_id)
        .first()
    )
    if delivery is None or delivery.state != DeliveryState.PENDING:
        return delivery.state if delivery else ""
    started = time.monotonic()
    at = timezone.now()
    result = _send(delivery)
    return record_attempt(delivery, result, at=at, duration=time.monotonic() - started)


def record_attempt(delivery: NotificationDelivery, result: Sent, *, at, duration: float) -> str:
    """The attempt's row and the delivery's next step, together. Conditional on the
    delivery being as we leased it: if our lease ran out and another worker recorded an
    attempt meanwhile, ours is dropped (the receiver deduplicates on the event id)."""
    number = delivery.attempts + 1
    now = timezone.now()
    if result.ok:
        state, changes = DeliveryState.DELIVERED, {"delivered_at": now, "next_attempt_at": None}
    elif result.give_up or number >= delivery.attempts_allowed:
        state, changes = DeliveryState.FAILED, {"next_attempt_at": None}
    else:
        state, changes = DeliveryState.PENDING, {"next_attempt_at": now + backoff(number)}
    with transaction.atomic():
        moved = delivery_move(
            delivery,
            state,
            actor=NOTIFIER,
            attempts=number,
            reason="" if result.ok else result.detail,
            last_status=result.status,
            last_error="" if result.ok else result.detail,
            **changes,
        )
        if not moved:
            return DeliveryState.PENDING
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=number,
            at=at,
            ok=result.ok,
            status=result.status,
            detail=result.detail,
            duration_ms=int(duration * 1000),
        )
    logger.info(
        "notification %s (%s → %s): %s after %d attempt(s)",
        delivery.pk,
        delivery.event.kind,
        delivery.channel.name,
        state,
        number,
    )
    return state
