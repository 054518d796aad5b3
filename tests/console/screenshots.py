"""`make screenshots`: screenshots of every console page with demo data, at 1280×800 (desktop)
and 390×844 (phone), in ./var/screenshots (`NAME-1280.png`, `NAME-390.png` and the full-page
`NAME-390-full.png`, `NAME-1280-full.png`).

Run explicitly (`pytest tests/console/screenshots.py`); the name keeps it out of `make test`.
The demo data is made the way production makes it: runs and proposals through the services,
dispatch over HTTP to the demo downstream with injected faults, reconciliation reading the
authoritative state back, and operators acting through the console's own services.
"""

import contextlib
import re
from pathlib import Path

import pytest

from runs import decisions, replay, runtime
from runs.engine import dispatch
from runs.propose import action_propose
from tests.builders import make_world
from tests.console.conftest import (
    agent_of,
    declared_tool,
    make_awaiting,
    make_failed_run_with_tools,
    make_failed_run_without_tools,
    make_needs_human,
    make_resent,
    make_settled_by_lookup,
    make_unknown,
    operator_actor,
    propose,
    sign_in,
    start_run,
    tool,
    user,
    wait_state,
)

OUT = Path(__file__).resolve().parents[2] / "var" / "screenshots"
pytestmark = [pytest.mark.browser]


def demo_world(downstream):
    """The shared builder with people's names, so that the screenshots read like a console
    in use."""
    return make_world(
        downstream,
        tenant_slug="acme-support",
        tenant_name="Acme Support",
        other_slug="globex",
        agent="support-agent",
        names=("ana", "omar", "dana", "olga"),
        separator=".",
    )


def test_screenshots(live_db, downstream, new_page, console_server, settings):
    # The demo data takes a while to build on a busy machine: its reads stay fresh enough to
    # decide on (the resolve rule's limit), as they would in a console in use.
    settings.RESOLVE_READ_MAX_AGE_SECONDS = 900
    OUT.mkdir(parents=True, exist_ok=True)
    w = demo_world(downstream)
    tool(w, "update_ticket", identity_fields=["status"])
    tool(w, "send_email", prefix="email", requires_approval=True)
    run = start_run(w, config={"ticket_batch": "2026-11-30", "model": "gpt-x", "limit": 40})

    # Settled history, so that the queue is the exception rather than the rule.
    for n in range(6):
        target = f"TCK-{4100 + n}"
        w.downstream.seed(target, {"status": "open"}, version=1)
        a = propose(w, run, tool(w), target, {"status": "resolved"}, 1)
        dispatch.action_dispatch(a.pk)
        wait_state(a.pk, {"succeeded", "failed", "unknown", "needs_human"})

    needs = make_needs_human(w, run=run, target="TCK-4217")
    make_needs_human(w, run=run, target="TCK-4302")
    make_unknown(w, run=run, target="TCK-4388")
    make_unknown(w, run=run, target="TCK-4391")
    awaiting = make_awaiting(
        w,
        run=run,
        target="maria.lopez@example.com",
        reason="Maria asked for written confirmation of refund R-2231.",
    )
    make_awaiting(w, run=run, target="j.chen@example.com")
    denied = make_awaiting(w, run=run, target="all-customers@example.com")
    decisions.approval_request_deny(
        denied.approval_request,
        reason="Bulk mail to every customer needs a marketing sign-off.",
        actor=operator_actor(w.approver),
    )
    decisions.action_claim_for_operator(needs, user=user(w.oncall), actor=operator_actor(w.oncall))
    failed_run = make_failed_run_with_tools(w)
    replay.run_replay(
        failed_run,
        force=True,
        reason="Ticket updates are idempotent by key; the ledger guards them.",
        actor=operator_actor(w.admin),
    )
    runtime.run_finish(
        run, status="error", error_message="worker lost", tools_called=None, actor=agent_of(w)
    )

    # A runtime deriving a key from the wrong thing: the same key for another ticket.
    from core.errors import IdempotencyConflict

    held = propose(w, start_run(w), tool(w), "TCK-5001", {"status": "closed"}, key="evt-77:close")
    with contextlib.suppress(IdempotencyConflict):
        action_propose(
            run=start_run(w),
            tool=tool(w),
            target="TCK-5002",
            desired_state={"status": "closed"},
            expected_version=None,
            idempotency_key=held.idempotency_key,
            actor=agent_of(w),
        )

    # What tools declare: an e-mail settled by the outbox's lookup, one the
    # outbox never received and that was sent again, and a run whose replay they make safe.
    safe_run = start_run(w, config={"campaign": "renewal-2026-12"})
    by_lookup = make_settled_by_lookup(w, run=safe_run, target="maria.lopez@example.com")
    resent = make_resent(w, run=safe_run, target="j.chen@example.com")
    search = declared_tool(w, "search_tickets", prefix="search", effect="read_only", lookup=False)
    propose(w, safe_run, search, "open", {"status": "open"})
    propose(w, safe_run, tool(w), "TCK-4400", {"status": "open"})
    runtime.run_finish(
        safe_run,
        status="error",
        error_message="The LLM provider answered 529 after 3 of 40 tickets.",
        tools_called=["notify_customer", "search_tickets", "update_ticket"],
        actor=agent_of(w),
    )

    # Notifications: a webhook that delivers, a Slack channel whose receiver is down, e-mail.
    from notifications.services import channel_create
    from tests.receiver import start_receiver

    pager, pager_server = start_receiver()
    down, down_server = start_receiver(script=[500] * 10)
    _, pager.secret = channel_create(
        tenant=w.tenant,
        name="on-call pager",
        kind="webhook",
        url=pager.url,
        events=["action.needs_human", "action.unknown_overdue", "replay.forced"],
        actor=operator_actor(w.admin),
    )
    channel_create(
        tenant=w.tenant,
        name="#support-approvals",
        kind="slack",
        url=down.url,
        events=["approval.requested", "approval.sla_breached"],
        actor=operator_actor(w.admin),
    )
    channel_create(
        tenant=w.tenant,
        name="approver e-mail",
        kind="email",
        events=["approval.requested", "approval.expiring"],
        actor=operator_actor(w.admin),
    )
    make_needs_human(w, run=start_run(w), target="TCK-4420")
    make_awaiting(w, run=start_run(w), target="l.nguyen@example.com")
    deliver_all()
    pager_server.shutdown()
    down_server.shutdown()
    replay_run = failed_run.replays.first()
    clean_failed = make_failed_run_without_tools(w)
    truth = replay_truth_world(w)

    shots = {
        "action-lookup": f"/actions/{by_lookup.pk}/",
        "action-resend": f"/actions/{resent.pk}/",
        "run-declarations": f"/runs/{safe_run.pk}/",
        "queue": "/",
        "action": f"/actions/{needs.pk}/",
        "approvals": "/approvals/",
        "audit": "/audit/",
        "action-approval": f"/actions/{awaiting.pk}/",
        "runs": "/runs/",
        "run": f"/runs/{failed_run.pk}/",
        "replays": "/replays/",
        **extra_shots(awaiting, run),
        "dry-run-forced": f"/runs/{truth['forced'].pk}/",
        "dry-run-futile": f"/runs/{truth['futile'].pk}/",
        "dry-run-single": f"/runs/{truth['single'].pk}/",
        "settings": "/settings/",
        "audit-of-run": f"/audit/?run={truth['forced'].pk}",
        "notifications": "/notifications/",
        "deliveries": "/notifications/deliveries/",
        "preferences": "/preferences/",
        "tokens": "/tokens/",
        "run-replay": f"/runs/{replay_run.pk}/",
    }

    from django.test import RequestFactory

    from takeover.errors import server_error

    error_page = server_error(RequestFactory().get("/")).content

    def shoot(page, name, width):
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(OUT / f"{name}-{width}.png"))
        page.screenshot(path=str(OUT / f"{name}-{width}-full.png"), full_page=True)

    for width, height in WIDTHS:
        page = new_page()
        page.set_viewport_size({"width": width, "height": height})
        page.goto(console_server("/login/"))
        shoot(page, "login", width)
        sign_in(page, console_server, w.admin)
        for name, path in shots.items():
            page.goto(console_server(path))
            shoot(page, name, width)
        # Pages reached by a POST: a bulk preview, its result, a new signing secret.
        page.goto(console_server("/"))
        for box in page.locator('input[form="bulk-form"]').all()[:3]:
            box.check()
        page.get_by_label("With the selected").select_option("recheck")
        page.get_by_role("button", name="Preview").click()
        shoot(page, "bulk-preview", width)
        page.get_by_role("button", name=re.compile("^Confirm")).click()
        shoot(page, "bulk-done", width)
        page.goto(console_server("/runs/"))
        for r in (failed_run, run, replay_run, clean_failed):
            page.locator(f"#pick-{r.pk}").check()
        page.get_by_label(re.compile("Force where the rule refuses")).check()
        page.get_by_label(re.compile("^Reason")).fill("Ticket updates are keyed.")
        page.get_by_role("button", name="Preview replay of the selected").click()
        shoot(page, "bulk-replay-preview", width)
        # Bulk resolve as succeeded of needs-human items whose fresh read differs: each is
        # called out and needs its own tick.
        page.goto(console_server("/"))
        for pk in truth["needs"]:
            page.locator(f"#pick-{pk}").check()
        page.get_by_label("With the selected").select_option("resolve:succeeded")
        page.get_by_label(re.compile("^Reason")).fill("Closed in the helpdesk by hand.")
        page.get_by_role("button", name="Preview").click()
        shoot(page, "bulk-contradicting", width)
        # Four eyes, seen by the second admin: the inbox and the confirm page.
        second = new_page()
        second.set_viewport_size({"width": width, "height": height})
        sign_in(second, console_server, truth["second_admin"])
        second.goto(console_server("/force-replays/"))
        shoot(second, "four-eyes-inbox", width)
        second.goto(console_server(f"/force-replays/{truth['request'].pk}/"))
        shoot(second, "four-eyes-confirm", width)
        # A settled action seen by a colleague who was typing a reason.
        watch = truth["watched"][width]
        second.goto(console_server(f"/actions/{watch.pk}/"))
        second.get_by_label("Reason").fill(
            "Called the customer: the ticket is closed on their side."
        )
        decisions.action_resolve(
            watch,
            outcome="failed",
            reason="The helpdesk shows it still open; the close never landed.",
            actor=operator_actor(w.oncall),
        )
        second.locator("#settled-line").wait_for(timeout=10_000)
        shoot(second, "action-settled-by-colleague", width)
        page.goto(console_server("/notifications/"))
        form = page.locator("#add-channel")
        form.get_by_label("Name").fill(f"audit sink {width}")
        form.get_by_label(re.compile("^URL")).fill("http://127.0.0.1:9/takeover")
        form.get_by_label("Force replay done").check()
        form.get_by_role("button", name="Add the channel").click()
        shoot(page, "notifications-secret", width)
        # The 500 page, as the server renders it (nothing here fails on purpose).
        page.route(
            console_server("/__500__"),
            lambda route: route.fulfill(
                status=500, body=error_page, content_type="text/html; charset=utf-8"
            ),
        )
        page.goto(console_server("/__500__"))
        shoot(page, "server-error", width)
    assert (OUT / "queue-390.png").exists()


def replay_truth_world(w) -> dict:
    """The replay and four-eyes states: a forced replay waiting for a second
    admin, a run a replay cannot fix, a run a replay may repeat, needs-human actions for a
    contradicting bulk resolve, 200-character keys and reasons."""
    from core.services import tenant_settings_update
    from ledger.models import LedgerEntry
    from ledger.services import ledger_revoke
    from tests.builders import long_text
    from tests.console.conftest import add_operator

    def failed_run(target, expected_version, key, config):
        run = start_run(w, config=config)
        w.downstream.seed(target, {"status": "open"}, version=5)
        a = propose(w, run, tool(w), target, {"status": "closed"}, expected_version, key=key)
        dispatch.action_dispatch(a.pk)
        wait_state(a.pk, {"succeeded", "failed"})
        runtime.run_finish(
            run,
            status="error",
            error_message="The LLM provider timed out after the ticket update.",
            tools_called=["update_ticket"],
            actor=agent_of(w),
        )
        return run, a

    forced, _ = failed_run(
        "TCK-6001", 5, "evt-2026-12-01:" + long_text("close-", 180), {"batch": 61}
    )
    futile, _ = failed_run("TCK-6002", 4, "evt-2026-12-01:close-TCK-6002", {"batch": 62})
    single, revoked = failed_run("TCK-6003", 5, "evt-2026-12-01:close-TCK-6003", {"batch": 63})
    ledger_revoke(
        LedgerEntry.objects.get(tenant=w.tenant, key=revoked.idempotency_key),
        actor=operator_actor(w.admin),
        reason="The ticket was reopened by the customer; close it again.",
    )
    tenant_settings_update(w.tenant, actor=operator_actor(w.admin), four_eyes_force_replay=True)
    _, request = replay.run_force_replay(
        forced,
        reason="Ticket updates are keyed by event; the ledger answers a repeat. "
        + long_text("see-runbook-", 120),
        actor=operator_actor(w.admin),
    )
    second_admin = add_operator(w, "pat", "admin")
    needs = [make_needs_human(w, target=f"TCK-70{n}") for n in range(2)]
    watched = {width: make_needs_human(w, target=f"TCK-71{width}") for width, _ in WIDTHS}
    return {
        "forced": forced,
        "futile": futile,
        "single": single,
        "request": request,
        "second_admin": second_admin,
        "needs": [a.pk for a in needs],
        "watched": watched,
    }


def deliver_all(rounds=8):
    """What a worker would do: claim due deliveries and send them, a few rounds (the
    failing receiver's retries are 1 s, then 2 s apart in the test settings)."""
    import time

    from notifications.delivery import deliver_leased, lease_deliveries

    for _ in range(rounds):
        for delivery_id in lease_deliveries(50):
            deliver_leased(delivery_id)
        time.sleep(0.6)


WIDTHS = [(1280, 800), (390, 844)]


def extra_shots(w, run) -> dict:
    """Pages added after the first set (kept apart so the list above stays readable)."""
    return {
        "not-found": "/actions/00000000-0000-0000-0000-000000000000/",
        "all-actions": "/actions/",
        "search": "/search/?q=TCK-4217&list=1",
        "approval-state": f"/approvals/{w.approval_request_id}/state/",
        "conflicts": "/conflicts/",
    }
