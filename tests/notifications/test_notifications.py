"""Notifications end to end: emitted in the transaction of their cause,
delivered by a real Celery worker to a real receiver on localhost, signed, retried with
backoff, given up and audited; time-based ones fire once each; e-mail through Django's
mail backend to the operators who asked for it; Slack's format."""

import threading
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import transaction

from core.models import AuditEvent, Role
from core.services import tenant_settings_update
from notifications.delivery import deliver_leased, lease_deliveries, lease_for, verify
from notifications.models import NotificationDelivery, NotificationEvent
from notifications.services import channel_create, delivery_retry, operator_set_email_events
from runs import alerts, replay
from tests.builders import (
    SETUP,
    add_operator,
    make_awaiting,
    make_failed_run_with_tools,
    make_unknown,
    make_world,
    operator_actor,
    user,
)
from tests.receiver import start_receiver

pytestmark = pytest.mark.worker


@pytest.fixture
def receiver():
    servers = []

    def make(secret="", script=()):
        rec, server = start_receiver(secret, script)
        servers.append(server)
        return rec

    yield make
    for server in servers:
        server.shutdown()


def channel(world, rec, events, kind="webhook", name="hook"):
    ch, secret = channel_create(
        tenant=world.tenant,
        name=name,
        kind=kind,
        url=rec.url if rec else "",
        events=events,
        actor=SETUP,
    )
    if rec is not None:
        rec.secret = secret
    return ch


def wait_delivery(channel, state, timeout=25.0, count=1):
    deadline = time.monotonic() + timeout
    while True:
        rows = list(NotificationDelivery.objects.filter(channel=channel, state=state))
        if len(rows) >= count or time.monotonic() > deadline:
            assert len(rows) >= count, list(
                NotificationDelivery.objects.filter(channel=channel).values(
                    "state", "attempts", "last_error"
                )
            )
            return rows


def test_a_webhook_is_delivered_signed_and_verified_by_a_receiver(
    live_db, downstream, worker, receiver
):
    world = make_world(downstream)
    rec = receiver()
    hook = channel(world, rec, ["approval.requested"])
    action = make_awaiting(world, reason="Maria asked for it in writing.")

    (got,) = rec.wait_for(1)
    assert got.verified and got.status == 200
    body = got.json
    assert body["type"] == "approval.requested"
    assert body["tenant"] == world.tenant.slug
    assert body["data"]["approval_request"] == str(action.approval_request_id)
    assert body["data"]["reason"] == "Maria asked for it in writing."
    assert body["url"].endswith(f"/approvals/#request-{action.approval_request_id}")
    assert got.headers["x-takeover-event"] == "approval.requested"
    assert got.headers["x-takeover-event-id"] == body["id"]
    (delivery,) = wait_delivery(hook, "delivered")
    assert delivery.attempts == 1 and delivery.last_status == 200
    assert str(delivery.event_id) == body["id"]

    # The same check refuses what an attacker could send: a changed body, a wrong secret,
    # and a captured request replayed later (its timestamp is too old).
    headers = got.headers
    assert not rec.verify(headers, got.body.replace(b"Maria", b"Mallory"))
    assert not verify(
        "whsec_other",
        timestamp=headers["x-takeover-timestamp"],
        signature=headers["x-takeover-signature"],
        body=got.body,
    )
    assert verify(
        rec.secret,
        timestamp=headers["x-takeover-timestamp"],
        signature=headers["x-takeover-signature"],
        body=got.body,
    )
    assert not verify(
        rec.secret,
        timestamp=headers["x-takeover-timestamp"],
        signature=headers["x-takeover-signature"],
        body=got.body,
        now=int(headers["x-takeover-timestamp"]) + 301,
    )


def test_a_failing_receiver_is_retried_with_backoff_and_the_same_event_id(
    live_db, downstream, worker, receiver
):
    world = make_world(downstream)
    rec = receiver(script=[503, 500])
    hook = channel(world, rec, ["approval.requested"])
    make_awaiting(world)

    first, second, third = rec.wait_for(3)
    (delivery,) = wait_delivery(hook, "delivered")
    assert delivery.attempts == 3
    assert [r.status for r in (first, second, third)] == [503, 500, 200]
    assert all(r.verified for r in (first, second, third))  # each attempt signed afresh
    assert len({r.headers["x-takeover-event-id"] for r in (first, second, third)}) == 1
    assert first.body == second.body == third.body
    # backoff: base (1 s in the tests), then twice that
    assert second.at - first.at >= 1.0
    assert third.at - second.at >= 2.0
    log = list(delivery.attempt_log.all())
    assert [(a.number, a.ok, a.status) for a in log] == [
        (1, False, 503),
        (2, False, 500),
        (3, True, 200),
    ]


def test_a_receiver_that_keeps_failing_is_given_up_audited_and_can_be_sent_again(
    live_db, downstream, worker, receiver
):
    world = make_world(downstream)
    rec = receiver(script=[500] * settings.NOTIFY_MAX_ATTEMPTS)
    hook = channel(world, rec, ["approval.requested"])
    make_awaiting(world)
    (delivery,) = wait_delivery(hook, "failed")
    assert delivery.attempts == settings.NOTIFY_MAX_ATTEMPTS == len(rec.received)
    event = AuditEvent.objects.get(verb="notification.failed", object_id=str(delivery.pk))
    assert event.tenant_id == world.tenant.pk and event.after["attempts"] == delivery.attempts

    delivery_retry(delivery, actor=operator_actor(world.admin))  # the receiver is fixed
    wait_delivery(hook, "delivered")
    assert rec.received[-1].status == 200
    assert (
        AuditEvent.objects.filter(verb="notification.retry", object_id=str(delivery.pk)).count()
        == 1
    )


def test_an_event_rolls_back_with_the_change_that_caused_it(live_db, downstream, receiver):
    world = make_world(downstream)
    channel(world, receiver(), ["approval.requested"])
    with pytest.raises(RuntimeError), transaction.atomic():
        action = make_awaiting(world)
        assert NotificationEvent.objects.filter(subject_id=action.approval_request_id).exists()
        raise RuntimeError("the proposal fails after the request was opened")
    assert not NotificationEvent.objects.filter(tenant=world.tenant).exists()
    assert not NotificationDelivery.objects.filter(tenant=world.tenant).exists()


def test_without_a_listening_channel_nothing_is_recorded(live_db, downstream, receiver):
    world = make_world(downstream)
    channel(world, receiver(), ["replay.forced"])  # listens, but not for this kind
    make_awaiting(world)
    assert not NotificationEvent.objects.filter(tenant=world.tenant).exists()


def test_time_based_notifications_fire_once_each_however_many_sweeps_see_them(
    live_db, downstream, worker, receiver
):
    from datetime import timedelta

    from django.utils import timezone

    world = make_world(downstream)
    rec = receiver()
    hook = channel(
        world, rec, ["action.unknown_overdue", "approval.expiring", "approval.sla_breached"]
    )
    tenant_settings_update(
        world.tenant,
        actor=SETUP,
        unknown_alert_seconds=600,
        approval_expiry_warning_seconds=3600,
        approval_sla_seconds=300,
    )
    unknown = make_unknown(world)
    awaiting = make_awaiting(world)
    alerts.alerts_sweep()  # nothing of ours is due yet
    assert not NotificationEvent.objects.filter(tenant=world.tenant).exists()

    # Later: past the unknown threshold and the SLA, within an hour of the expiry. Four
    # sweeps at once, and two more after them: one event of each kind.
    later = timezone.now() + timedelta(seconds=settings.APPROVAL_REQUEST_TTL_SECONDS - 1800)
    threads = [
        threading.Thread(target=alerts.alerts_sweep, kwargs={"now": later}) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alerts.alerts_sweep(now=later)
    alerts.alerts_sweep(now=later + timedelta(minutes=5))
    events = NotificationEvent.objects.filter(tenant=world.tenant)
    assert sorted(events.values_list("kind", "subject_id")) == sorted(
        [
            ("action.unknown_overdue", unknown.pk),
            ("approval.expiring", awaiting.approval_request_id),
            ("approval.sla_breached", awaiting.approval_request_id),
        ]
    )
    wait_delivery(hook, "delivered", count=3)
    time.sleep(2)  # the worker's own sweeps run every second meanwhile
    got = rec.wait_for(3)
    assert len(rec.received) == 3 and all(r.verified for r in got)
    kinds = {r.json["type"]: r.json for r in got}
    assert "over the 5 min approval SLA" in kinds["approval.sla_breached"]["summary"]
    assert "expires in 30 min" in kinds["approval.expiring"]["summary"]
    assert kinds["action.unknown_overdue"]["data"]["action"] == str(unknown.pk)


def test_needs_human_and_force_replay_are_announced_from_their_transitions(
    live_db, downstream, worker, receiver
):
    from tests.builders import make_needs_human

    world = make_world(downstream)
    rec = receiver()
    channel(world, rec, ["action.needs_human", "replay.forced"])
    needs = make_needs_human(world)
    run = make_failed_run_with_tools(world)
    new_run = replay.run_replay(
        run, force=True, reason="keys guard every ticket", actor=operator_actor(world.admin)
    )
    got = {r.json["type"]: r.json for r in rec.wait_for(2)}
    assert got["action.needs_human"]["data"]["action"] == str(needs.pk)
    assert "authoritative state differs: status" in got["action.needs_human"]["summary"]
    forced = got["replay.forced"]["data"]
    assert forced["new_run"] == str(new_run.pk) and forced["reason"] == "keys guard every ticket"
    assert forced["actor"] == {"kind": "operator", "name": world.admin.username}


def test_email_goes_to_members_who_asked_for_it_and_hold_the_role(live_db, downstream, worker):
    world = make_world(downstream)
    second_approver = add_operator(world, "approver2", Role.APPROVER)
    mail = channel(
        world, None, ["approval.requested", "action.needs_human"], kind="email", name="mail"
    )
    wants = f"ana-{uuid.uuid4().hex[:6]}@example.com"
    operator_set_email_events(user(world.approver), email=wants, events=["approval.requested"])
    # Asked, but on-call only: approval requests are not for them.
    operator_set_email_events(
        user(world.oncall),
        email=f"omar-{uuid.uuid4().hex[:6]}@example.com",
        events=["approval.requested", "action.needs_human"],
    )
    # An approver with an address who did not ask.
    u = user(second_approver)
    u.email = "quiet@example.com"
    u.save(update_fields=["email"])

    action = make_awaiting(world, reason="Refund confirmation")
    (delivery,) = wait_delivery(mail, "delivered")
    assert delivery.recipient == wants
    assert NotificationDelivery.objects.filter(channel=mail).count() == 1
    # The worker's mail backend writes each message to a file (tests/settings.py).
    messages = [p.read_text() for p in Path(settings.EMAIL_FILE_PATH).glob("*.log")]
    mine = [m for m in messages if str(action.approval_request_id) in m]
    assert len(mine) == 1
    assert f"To: {wants}" in mine[0]
    assert f"[Takeover {world.tenant.slug}] Approval requested" in mine[0]
    assert "Refund confirmation" in mine[0]


def test_slack_channels_get_slacks_incoming_webhook_format(live_db, downstream, worker, receiver):
    world = make_world(downstream)
    rec = receiver()
    channel(world, rec, ["approval.requested"], kind="slack", name="slack")
    action = make_awaiting(world)
    (got,) = rec.wait_for(1)
    body = got.json
    assert set(body) == {"text", "blocks"} and got.verified
    assert body["text"].startswith(f"*Approval requested* ({world.tenant.slug}): ")
    assert action.target in body["text"] and "|Open in Takeover>" in body["text"]
    assert body["blocks"][0] == {
        "type": "section",
        "text": {"type": "mrkdwn", "text": body["text"]},
    }


def test_a_delivery_whose_worker_died_is_sent_after_its_lease(
    live_db, downstream, worker, receiver
):
    world = make_world(downstream)
    rec = receiver()
    hook = channel(world, rec, ["approval.requested"])
    # This process plays a worker that claims the delivery and dies: claimed in the
    # transaction that emitted it, so the real worker never sees it unclaimed.
    with transaction.atomic():
        make_awaiting(world)
        delivery = NotificationDelivery.objects.get(channel=hook)
        assert lease_deliveries(10, only=[delivery.pk]) == [delivery.pk]
    claimed_at = time.time()
    assert lease_deliveries(10, only=[delivery.pk]) == []  # leased: nobody else takes it
    (got,) = rec.wait_for(1, timeout=30)
    assert got.at - claimed_at >= lease_for().total_seconds() - 1  # not before the lease ran out
    (delivery,) = wait_delivery(hook, "delivered")
    assert delivery.attempts == 1


def test_webhooks_go_only_where_the_egress_policy_allows(live_db, downstream, receiver, settings):
    from core.errors import ValidationFailed

    world = make_world(downstream)
    # Registration: outside TOOL_URL_ALLOWLIST (the tests allow 127.0.0.1 only), or cloud
    # metadata, is refused, naming the field.
    for url in ("http://127.0.0.2:9/hook", "http://169.254.169.254/latest", "ftp://127.0.0.1/"):
        with pytest.raises(ValidationFailed) as refused:
            channel_create(
                tenant=world.tenant,
                name=f"bad {url}",
                kind="webhook",
                url=url,
                events=["approval.requested"],
                actor=SETUP,
            )
        assert "url" in refused.value.extra["errors"], url
    # Connect time: a destination allowed when the channel was added and refused now (the
    # deployer narrowed the allowlist) is given up at once, never sent.
    rec = receiver()
    hook = channel(world, rec, ["approval.requested"])
    with transaction.atomic():  # claimed here, so that the shared worker never sees it due
        make_awaiting(world)
        delivery = NotificationDelivery.objects.get(channel=hook)
        assert lease_deliveries(10, only=[delivery.pk]) == [delivery.pk]
    settings.TOOL_URL_ALLOWLIST = "tools.example.com"
    assert deliver_leased(delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert delivery.attempts == 1 and "egress refused" in delivery.last_error
    assert rec.received == []
