"""A tool's signing secret: generated at registration and shown once, rotated by an admin with
an overlap, audited without the secret itself, never shown to a principal."""

from datetime import timedelta

import time_machine
from django.utils import timezone

from core.models import AuditEvent, Tool

from ..conftest import problem

TOOL = {"name": "billing", "base_url": "http://127.0.0.1:9/billing"}


def test_registration_shows_the_signing_secret_once(world):
    admin = world.admin.client()
    created = admin.post("/api/v1/tools", TOOL, format="json")
    assert created.status_code == 201, created.content
    secret = created.json()["signing_secret"]
    assert secret.startswith("tks_") and len(secret) > 40
    assert Tool.objects.get(tenant=world.tenant, name="billing").signing_secret == secret
    # Never again: not in the tool, not in the list, not in the audit log.
    assert "signing_secret" not in admin.get("/api/v1/tools/billing").json()
    listed = admin.get("/api/v1/tools").json()["results"]
    assert all("signing_secret" not in t for t in listed)
    events = AuditEvent.objects.filter(tenant=world.tenant, object_type="tool")
    assert secret not in str(list(events.values("before", "after", "reason")))
    # Each tool its own.
    other = admin.post("/api/v1/tools", {**TOOL, "name": "billing2"}, format="json").json()
    assert other["signing_secret"] != secret


def test_rotation_with_overlap_signs_with_both_until_then(world):
    admin = world.admin.client()
    old = admin.post("/api/v1/tools", TOOL, format="json").json()["signing_secret"]
    rotated = admin.post(
        "/api/v1/tools/billing/rotate-secret",
        {"overlap_seconds": 3600, "reason": "yearly"},
        format="json",
    )
    assert rotated.status_code == 201, rotated.content
    new = rotated.json()["signing_secret"]
    assert new != old and rotated.json()["previous_secret_expires_at"]
    tool = Tool.objects.get(tenant=world.tenant, name="billing")
    assert tool.signing_secrets() == [new, old]
    with time_machine.travel(timezone.now() + timedelta(seconds=3601)):
        assert tool.signing_secrets() == [new]
    event = AuditEvent.objects.get(verb="tool.rotate_secret", object_id=str(tool.pk))
    assert event.reason == "yearly" and event.actor_name == world.admin.username
    assert new not in str(event.after) and old not in str(event.after)

    # Without an overlap the old one stops at once.
    again = admin.post("/api/v1/tools/billing/rotate-secret", {}, format="json").json()
    tool.refresh_from_db()
    assert tool.signing_secrets() == [again["signing_secret"]]
    assert again["previous_secret_expires_at"] is None


def test_rotation_is_admin_only_and_names_bad_fields(world):
    world.admin.client().post("/api/v1/tools", TOOL, format="json")
    url = "/api/v1/tools/billing/rotate-secret"
    assert world.oncall.client().post(url, {}, format="json").status_code == 403
    assert world.agent.client().post(url, {}, format="json").status_code == 403
    assert world.outsider.client().post(url, {}, format="json").status_code == 404
    bad = world.admin.client().post(url, {"overlap_seconds": -1}, format="json")
    assert bad.status_code == 400 and "overlap_seconds" in problem(bad)["errors"]
    # A principal sees the tool, but nothing about where it lives or how it is signed.
    seen = world.agent.client().get("/api/v1/tools/billing").json()
    assert set(seen) & {"base_url", "signing_secret", "signing_secret_created_at"} == set()
