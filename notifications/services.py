"""Notifications: signed webhooks, Slack-compatible webhooks and e-mail.

How a notification travels:

1. **Emitted in the transaction of its cause.** The service that changes the state calls
   `emit()` inside its own transaction: one `NotificationEvent` row and one
   `NotificationDelivery` row per channel (per recipient for e-mail) that listens for the
   kind. Either the change and its deliveries commit together, or neither does: no
   "approved, but nobody was told", no "told about something that rolled back". The
   time-based kinds (an action unknown for too long, a request about to expire, a request
   over the SLA) are emitted by the periodic sweep (`runs/alerts.py`). Domain code names a
   kind and a subject; the console gives the link to its page (`notifications.links`).
2. **Once each.** An event is unique per (kind, subject): the INSERT is `ON CONFLICT DO
   NOTHING`, so two sweeps racing over the same overdue action emit one event, and a later
   sweep emits nothing.
3. **The database is the queue.** Workers lease due deliveries
   (`notifications.delivery.lease_deliveries`, on the lease of `core.queue` that the
   action engine uses too) in the same drain that leases actions
   (`runs.engine.worker.drain`). The lease pushes `next_attempt_at` past the longest an
   attempt can take: a worker that dies mid-attempt leaves the row due again later. No
   broker message carries a delivery; the emitter's wake-up is deduplicated
   (`runs.wakeup`).
4. **Delivered at least once.** A 2xx (or a mail backend that accepted the message) is
   delivered; anything else is retried with exponential backoff up to
   `NOTIFY_MAX_ATTEMPTS`, then the delivery is failed (audited). A worker killed between
   the receiver's 2xx and our record re-sends it, so receivers deduplicate on the event id.
"""

import secrets
import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from core.audit import Actor, Verb, audit
from core.errors import StateConflict, ValidationFailed
from core.ids import new_id
from core.models import Membership, OperatorPreference, Role, Tenant
from core.states import Machine

from . import links
from .kinds import KINDS, TEST_KIND, roles_receiving
from .models import (
    ChannelKind,
    DeliveryState,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
)

# A delivery's life, declared once (core/states.py): tried while pending (each failed try
# schedules the next, pending → pending), then delivered or failed; an admin may send a
# failed one again. Moved only by `delivery_move`.
DELIVERY = Machine(
    "notification delivery",
    DeliveryState,
    {
        DeliveryState.PENDING: {
            DeliveryState.PENDING,
            DeliveryState.DELIVERED,
            DeliveryState.FAILED,
        },
        DeliveryState.DELIVERED: set(),
        DeliveryState.FAILED: {DeliveryState.PENDING},
    },
)
DELIVERY_VERBS = {
    DeliveryState.DELIVERED: Verb.NOTIFICATION_DELIVERED,
    DeliveryState.FAILED: Verb.NOTIFICATION_FAILED,
    DeliveryState.PENDING: Verb.NOTIFICATION_RETRY,  # failed → pending: sent again
}


def delivery_move(
    delivery: NotificationDelivery,
    to: str,
    *,
    actor: Actor,
    attempts: int | None = None,
    reason: str = "",
    **fields,
) -> bool:
    """Move a delivery from the state it was read in to `to`, if nobody moved it first: a
    conditional UPDATE checked by row count (and on the attempt count it was read with, so
    that of two workers recording the same attempt, the second changes nothing). A change of
    state is audited in the same transaction; pending → pending (the next try scheduled) is
    the delivery log's business, not the audit log's."""
    source = delivery.state
    DELIVERY.check(source, to)
    updated = NotificationDelivery.objects.filter(
        pk=delivery.pk, state=source, attempts=delivery.attempts
    ).update(state=to, **({"attempts": attempts} if attempts is not None else {}), **fields)
    if updated != 1:
        return False
    if to != source:
        audit(
            actor=actor,
            verb=DELIVERY_VERBS[to],
            obj=delivery,
            tenant=delivery.tenant,
            object_type="notificationdelivery",
            before={"state": source},
            after={
                "state": to,
                "attempts": attempts if attempts is not None else delivery.attempts,
                "channel": delivery.channel.name,
                "kind": delivery.event.kind,
            },
            reason=reason,
        )
    delivery.state = to
    if attempts is not None:
        delivery.attempts = attempts
    for name, value in fields.items():
        setattr(delivery, name, value)
    return True


# --- emitting (inside the caller's transaction) -------------------------------------------

INSERT_EVENT = """
INSERT INTO core_notificationevent
    (id, tenant_id, kind, subject_type, subject_id, summary, path, data, at)
VALUES (%(id)s, %(tenant)s, %(kind)s, %(subject_type)s, %(subject_id)s, %(summary)s,
        %(path)s, %(data)s, %(at)s)
ON CONFLICT (kind, subject_id) DO NOTHING
RETURNING id
"""


def emit(
    *,
    tenant: Tenant,
    kind: str,
    subject_type: str,
    subject_id,
    summary: str,
    data: dict | None = None,
    channels=None,
    recipients=None,
) -> int:
    """Record one event and its deliveries, in the caller's transaction. Returns how many
    deliveries were created (0 when no channel listens, or when this kind already fired for
    this subject). The caller wakes a worker after commit when it is not one.

    `channels` and `recipients` narrow the fan-out (a test notification goes to one channel,
    and an e-mail test to the admin who asked for it).
    """
    if channels is None:
        channels = list(
            NotificationChannel.objects.filter(tenant=tenant, enabled=True, events__contains=[kind])
        )
    if not channels:
        return 0
    now = timezone.now()
    event_id = new_id()
    with connection.cursor() as cursor:
        cursor.execute(
            INSERT_EVENT,
            {
                "id": event_id,
                "tenant": tenant.pk,
                "kind": kind,
                "subject_type": subject_type,
                "subject_id": uuid.UUID(str(subject_id)),
                "summary": summary,
                "path": links.path_for(subject_type, subject_id),
                "data": Jsonb(data or {}),
                "at": now,
            },
        )
        if cursor.fetchone() is None:
            return 0  # fired before: once each
    rows = []
    for channel in channels:
        if channel.kind == ChannelKind.EMAIL:
            to = recipients if recipients is not None else email_recipients(tenant, kind)
        else:
            to = [""]  # a webhook: one delivery, to the channel itself
        rows += [
            NotificationDelivery(
                tenant=tenant,
                event_id=event_id,
                channel=channel,
                recipient=address,
                attempts_allowed=settings.NOTIFY_MAX_ATTEMPTS,
                next_attempt_at=now,
                created_at=now,
            )
            for address in to
        ]
    NotificationDelivery.objects.bulk_create(rows)
    return len(rows)


def email_recipients(tenant: Tenant, kind: str) -> list[str]:
    """Members of `tenant` whose role receives `kind` and who asked for it by e-mail."""
    role = KINDS[kind].role
    addresses = (
        Membership.objects.filter(
            tenant=tenant,
            role__in=roles_receiving(role),
            user__preference__email_events__contains=[kind],
        )
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )
    return sorted(set(addresses))


def tenants_listening(kind: str) -> list:
    """Ids of the tenants with an enabled channel for `kind` (the sweep looks only there)."""
    return list(
        NotificationChannel.objects.filter(enabled=True, events__contains=[kind])
        .values_list("tenant_id", flat=True)
        .distinct()
    )


def already_fired(kind: str, tenant_id):
    """The subjects `kind` already fired for in this tenant (a subquery for the sweep)."""
    return NotificationEvent.objects.filter(tenant_id=tenant_id, kind=kind).values("subject_id")


# --- channels: set up by admins, each change audited -----------------------------------------


def _clean_events(events, kind: str) -> list[str]:
    events = list(dict.fromkeys(events or []))
    if unknown := [e for e in events if e not in KINDS]:
        raise ValidationFailed(
            "Unknown notification.", {"events": [f"Not a notification: {', '.join(unknown)}."]}
        )
    if not events:
        raise ValidationFailed("Nothing to send.", {"events": ["Choose at least one."]})
    return events


def validate_url(url: str) -> str:
    """A webhook URL: absolute http or https, a host, no user-info or fragment, and a
    destination the egress policy allows (TOOL_URL_ALLOWLIST, core/egress.py), like a tool's:
    a webhook is a request Takeover sends wherever an admin says, so the same rules hold.
    The address is checked again at every connection (`http_client`)."""
    from core import egress

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValidationFailed("Not a valid URL.", {"url": [f"{exc}."]}) from exc
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValidationFailed("Not a valid URL.", {"url": ["An absolute http or https URL."]})
    if "@" in parts.netloc or parts.fragment or any(ord(c) < 0x21 for c in url):
        raise ValidationFailed(
            "Not a valid URL.", {"url": ["No user:password@, no #fragment, no spaces."]}
        )
    if port == 0:
        raise ValidationFailed("Not a valid URL.", {"url": ["Port 0 is not a destination."]})
    try:
        egress.check_destination(parts.hostname, port or (443 if parts.scheme == "https" else 80))
    except ValidationFailed as exc:
        said = [e for errors in exc.extra.get("errors", {}).values() for e in errors]
        raise ValidationFailed("The webhook URL is not allowed.", {"url": said}) from exc
    return url


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def channel_create(
    *, tenant: Tenant, name: str, kind: str, url: str = "", events, actor: Actor
) -> tuple[NotificationChannel, str]:
    """A new channel; returns it and its signing secret (shown once; empty for e-mail)."""
    actor.require(Role.ADMIN)
    name = (name or "").strip()
    if not name:
        raise ValidationFailed("A name is required.", {"name": ["Give it a name."]})
    if kind not in ChannelKind.values:
        raise ValidationFailed("Unknown kind.", {"kind": ["Webhook, Slack or e-mail."]})
    events = _clean_events(events, kind)
    url = "" if kind == ChannelKind.EMAIL else validate_url((url or "").strip())
    secret = "" if kind == ChannelKind.EMAIL else new_secret()
    with transaction.atomic():
        if NotificationChannel.objects.filter(tenant=tenant, name=name).exists():
            raise StateConflict(f"A channel named {name!r} already exists.")
        channel = NotificationChannel.objects.create(
            tenant=tenant, name=name, kind=kind, url=url, secret=secret, events=events
        )
        audit(
            actor=actor,
            verb=Verb.NOTIFICATION_CHANNEL_CREATE,
            obj=channel,
            tenant=tenant,
            after={"name": name, "kind": kind, "url": url, "events": events},
        )
    return channel, secret


def channel_update(
    channel: NotificationChannel, *, actor: Actor, events=None, enabled=None
) -> NotificationChannel:
    """Change what a channel listens for, or switch it on or off. Deliveries already
    pending on a channel switched off are given up when their turn comes."""
    actor.require(Role.ADMIN)
    with transaction.atomic():
        channel = NotificationChannel.objects.select_for_update(no_key=True).get(pk=channel.pk)
        before, after, fields = {}, {}, []
        if events is not None:
            events = _clean_events(events, channel.kind)
            before["events"], after["events"] = channel.events, events
            channel.events = events
            fields.append("events")
        if enabled is not None:
            before["enabled"], after["enabled"] = channel.enabled, bool(enabled)
            channel.enabled = bool(enabled)
            fields.append("enabled")
        if fields:
            channel.save(update_fields=fields)
            audit(
                actor=actor,
                verb=Verb.NOTIFICATION_CHANNEL_UPDATE,
                obj=channel,
                tenant=channel.tenant,
                before=before,
                after=after,
            )
    return channel


def channel_rotate_secret(channel: NotificationChannel, *, actor: Actor) -> str:
    """A new signing secret, in force for every attempt from now on (a receiver that
    accepts both for a while switches without losing a delivery). Returned once."""
    actor.require(Role.ADMIN)
    if channel.kind == ChannelKind.EMAIL:
        raise StateConflict("An e-mail channel has no signing secret.")
    secret = new_secret()
    with transaction.atomic():
        NotificationChannel.objects.filter(pk=channel.pk).update(secret=secret)
        audit(
            actor=actor,
            verb=Verb.NOTIFICATION_SECRET_ROTATE,
            obj=channel,
            tenant=channel.tenant,
            after={"name": channel.name},
        )
    channel.secret = secret
    return secret


def notification_test(channel: NotificationChannel, *, actor: Actor, email: str = "") -> int:
    """Send a test notification through one channel (an e-mail channel sends it to
    `email`, the admin who asked). Returns the deliveries created."""
    actor.require(Role.ADMIN)
    if channel.kind == ChannelKind.EMAIL and not email:
        raise StateConflict(
            "Your account has no e-mail address; add one in your preferences first."
        )
    subject = uuid.uuid4()
    with transaction.atomic():
        created = emit(
            tenant=channel.tenant,
            kind=TEST_KIND,
            subject_type="channel",
            subject_id=subject,
            summary=f"Test notification from Takeover for {channel.tenant.slug}, "
            f"channel {channel.name!r}, sent by {actor.kind}:{actor.name}.",
            data={"channel": channel.name, "sent_by": actor.as_dict()},
            channels=[channel],
            recipients=[email] if email else None,
        )
        audit(
            actor=actor,
            verb=Verb.NOTIFICATION_TEST,
            obj=channel,
            tenant=channel.tenant,
            after={"name": channel.name, "deliveries": created},
        )
    return created


def delivery_retry(delivery: NotificationDelivery, *, actor: Actor) -> NotificationDelivery:
    """An admin sends a failed delivery again (the receiver is fixed): it is due now, with
    a fresh set of attempts."""
    actor.require(Role.ADMIN)
    delivery = NotificationDelivery.objects.select_related("channel", "event", "tenant").get(
        pk=delivery.pk
    )
    if delivery.state != DeliveryState.FAILED:
        raise StateConflict("Only a failed delivery can be sent again.")
    with transaction.atomic():
        if not delivery_move(
            delivery,
            DeliveryState.PENDING,
            actor=actor,
            next_attempt_at=timezone.now(),
            attempts_allowed=delivery.attempts + settings.NOTIFY_MAX_ATTEMPTS,
        ):
            raise StateConflict("Only a failed delivery can be sent again.")
    return delivery


def operator_set_email_events(user, *, email: str, events) -> list[str]:
    """An operator's own choice of notifications by e-mail, and the address they go to.
    A display-and-contact preference, like the time zone: not audited."""
    from django.core.exceptions import ValidationError
    from django.core.validators import validate_email

    email = (email or "").strip()
    if email:
        try:
            validate_email(email)
        except ValidationError as exc:
            raise ValidationFailed(
                "Not an e-mail address.", {"email": ["Not an e-mail address."]}
            ) from exc
    events = [e for e in dict.fromkeys(events or []) if e in KINDS]
    if events and not email:
        raise ValidationFailed(
            "An e-mail address is needed.", {"email": ["Add the address to send them to."]}
        )
    with transaction.atomic():
        if user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        OperatorPreference.objects.update_or_create(user=user, defaults={"email_events": events})
    return events
