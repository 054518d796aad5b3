"""Notifications' records: where a tenant's notifications go (channels), what happened
(events), the outbox (deliveries) and each try of a delivery. The tables were created by
`core` and kept their names when the models moved here (the migrations moved the state
only), so no row moved."""

import uuid

from django.db import models
from django.db.models import Q

from core.ids import new_id
from core.models import Tenant


class ChannelKind(models.TextChoices):
    WEBHOOK = "webhook", "Signed webhook (JSON)"
    SLACK = "slack", "Slack-compatible incoming webhook"
    EMAIL = "email", "E-mail to operators who opt in"


class NotificationChannel(models.Model):
    """Where a tenant's notifications go, and which kinds. Set up by an admin in the console.

    `secret` signs every webhook and Slack request (HMAC-SHA256, README "Notifications"). It
    is stored as it is, because signing needs it; the console shows it once, at creation and
    at rotation."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    url = models.URLField(max_length=500, blank=True)
    secret = models.CharField(max_length=80, blank=True)
    events = models.JSONField(default=list)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "core_notificationchannel"  # core's table, kept
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="channel_name_per_tenant"),
            models.CheckConstraint(
                condition=Q(kind__in=ChannelKind.values), name="channel_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind="email") | ~Q(url=""), name="channel_url_unless_email"
            ),
        ]

    def __str__(self):
        return self.name


class NotificationEvent(models.Model):
    """One thing worth telling people, recorded in the transaction of the change that
    caused it. At most one per (kind, subject): the time-based kinds, found by the periodic
    sweep, fire once each however many sweeps see them."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=40)
    subject_type = models.CharField(max_length=40)
    subject_id = models.UUIDField()
    summary = models.TextField()  # one line for people: the Slack text, the e-mail subject
    path = models.CharField(max_length=300, blank=True)  # the console page it is about
    data = models.JSONField()
    at = models.DateTimeField()

    class Meta:
        db_table = "core_notificationevent"  # core's table, kept
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "subject_id"], name="notification_once_per_subject"
            )
        ]
        indexes = [models.Index(fields=["tenant", "kind"], name="notification_event_kind")]


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up (attempts exhausted, or the channel was switched off)


class NotificationDelivery(models.Model):
    """The outbox: one event to one channel (and, for e-mail, one recipient).

    The database is the queue: workers claim due rows (`state = pending`, `next_attempt_at`
    passed) with FOR UPDATE SKIP LOCKED, and the claim pushes `next_attempt_at` past the
    longest an attempt can take, so the row is leased to one worker and comes back by itself
    if that worker dies."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    event = models.ForeignKey(
        NotificationEvent, on_delete=models.PROTECT, related_name="deliveries"
    )
    channel = models.ForeignKey(
        NotificationChannel, on_delete=models.PROTECT, related_name="deliveries"
    )
    recipient = models.CharField(max_length=254, blank=True)  # e-mail only
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    # Given up after this many attempts in all (NOTIFY_MAX_ATTEMPTS; an admin's "send again"
    # allows that many more).
    attempts_allowed = models.PositiveIntegerField(default=1)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "core_notificationdelivery"  # core's table, kept
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=DeliveryState.values), name="delivery_state_valid"
            ),
            models.CheckConstraint(
                condition=~Q(state="pending") | Q(next_attempt_at__isnull=False),
                name="delivery_pending_is_due_sometime",
            ),
            models.CheckConstraint(
                condition=~Q(state="delivered") | Q(delivered_at__isnull=False),
                name="delivery_delivered_has_time",
            ),
        ]
        indexes = [
            # The claim's predicate, and nothing else: a few index entries at any log size.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state="pending"),
                name="delivery_due",
            ),
            models.Index(fields=["tenant", "-created_at"], name="delivery_log"),
        ]


class DeliveryAttempt(models.Model):
    """One try of a delivery: when, how it ended, how long it took."""

    delivery = models.ForeignKey(
        NotificationDelivery, on_delete=models.PROTECT, related_name="attempt_log"
    )
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    ok = models.BooleanField()
    status = models.PositiveIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "core_deliveryattempt"  # core's table, kept
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "number"], name="delivery_attempt_number_unique"
            )
        ]
