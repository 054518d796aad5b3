"""In headless Chromium: notifications set up in the
console and delivered by a real worker to a real receiver that verifies their signature; the
approval SLA escalated through them; bulk decisions whose preview matches what the confirm
does; and the run page following the run without wiping a typed reason."""

import re
import time
import uuid

import pytest
from playwright.sync_api import expect

from core.models import AuditEvent, Role
from core.services import tenant_settings_update
from ledger.models import LedgerEntry
from ledger.services import ledger_revoke
from notifications.models import NotificationDelivery, NotificationEvent
from runs import decisions, runtime
from runs.engine import dispatch
from runs.models import Action, Run
from tests.builders import make_world
from tests.console.conftest import (
    add_operator,
    agent_of,
    make_awaiting,
    make_blocked,
    make_failed_run_without_tools,
    make_needs_human,
    operator_actor,
    propose,
    sign_in,
    start_run,
    tool,
    user,
    wait_state,
)
from tests.receiver import start_receiver

pytestmark = [pytest.mark.browser, pytest.mark.worker]


@pytest.fixture
def receiver():
    servers = []

    def make(script=()):
        rec, server = start_receiver("", script)
        servers.append(server)
        return rec

    yield make
    for server in servers:
        server.shutdown()


# --- part 5: notifications ---------------------------------------------------------------------


def test_admin_sets_up_a_webhook_and_a_delivery_is_signed_verified_and_logged(
    live_db, downstream, worker, receiver, new_page, console_server
):
    world = make_world(downstream)
    rec = receiver(script=[503])  # the first attempt fails: the log shows the retry
    page = sign_in(new_page(), console_server, world.admin)
    page.get_by_role("link", name="Notifications").click()
    expect(page.locator("#no-channels")).to_be_visible()
    form = page.locator("#add-channel")
    form.get_by_label("Name").fill("on-call pager")
    form.get_by_label("Kind").select_option("webhook")
    form.get_by_label(re.compile("^URL")).fill(rec.url)
    form.get_by_label("Approval requested").check()
    form.get_by_role("button", name="Add the channel").click()

    secret = page.locator("#new-secret-value").input_value()
    assert secret.startswith("whsec_")
    rec.secret = secret  # what the receiver's operator pastes into it
    page.reload()  # shown once: a reload (a new GET) does not show it again
    expect(page.locator("#new-secret-value")).to_have_count(0)
    expect(page.locator("#channels")).to_contain_text("on-call pager")

    action = make_awaiting(world, reason="The customer asked twice.")
    first, second = rec.wait_for(2)
    assert first.status == 503 and second.status == 200
    assert first.verified and second.verified  # the receiver checked each signature itself
    assert second.json["data"]["approval_request"] == str(action.approval_request_id)

    page.get_by_role("link", name="Delivery log").click()
    (delivery,) = NotificationDelivery.objects.filter(tenant=world.tenant)
    row = page.locator(f"#delivery-{delivery.pk}")
    expect(row).to_contain_text("delivered", timeout=10_000)
    expect(row).to_contain_text("Approval requested")
    expect(row).to_contain_text("The customer asked twice.")
    row.get_by_text("Each attempt").click()
    expect(row.locator("ol.attempts li")).to_have_count(2)
    expect(row.locator("ol.attempts li").first).to_contain_text("failed (HTTP 503)")

    # A test message from the channel's own button, followed live in the log.
    page.goto(console_server("/notifications/"))
    page.get_by_role("button", name="Send a test").click()
    expect(page.get_by_role("status").first).to_contain_text("Test notification queued")
    (test,) = rec.wait_for(1, type="notification.test")
    assert test.verified
    # The log of this channel: the approval request and the test, both delivered.
    expect(page.locator("tbody tr[data-state=delivered]")).to_have_count(2, timeout=10_000)
    assert AuditEvent.objects.filter(
        verb="notification.channel_create", tenant=world.tenant
    ).exists()


def test_approval_requests_over_the_sla_are_escalated_through_the_notifications(
    live_db, downstream, worker, receiver, new_page, console_server
):
    from notifications.services import channel_create

    world = make_world(downstream)
    rec = receiver()
    _, secret = channel_create(
        tenant=world.tenant,
        name="escalations",
        kind="slack",
        url=rec.url,
        events=["approval.sla_breached"],
        actor=operator_actor(world.admin),
    )
    rec.secret = secret
    waiting = make_awaiting(world)
    tenant_settings_update(world.tenant, actor=operator_actor(world.admin), approval_sla_seconds=2)
    # The worker's periodic sweep finds it past the SLA and escalates it, once.
    (got,) = rec.wait_for(1, timeout=20)
    assert got.verified and "over the 2 s approval SLA" in got.json["text"]
    page = sign_in(new_page(), console_server, world.approver, path="/approvals/")
    expect(page.locator(f"#request-{waiting.approval_request_id}")).to_have_class(
        re.compile("over-sla")
    )
    time.sleep(3)  # more sweeps: still one
    assert len(rec.received) == 1
    assert (
        NotificationEvent.objects.filter(kind="approval.sla_breached", tenant=world.tenant).count()
        == 1
    )
    tenant_settings_update(world.tenant, actor=operator_actor(world.admin), approval_sla_seconds=0)


def test_an_operator_chooses_notifications_by_email(live_db, downstream, new_page, console_server):
    world = make_world(downstream)
    page = sign_in(new_page(), console_server, world.oncall, path="/preferences/")
    box = page.locator("#email-preferences")
    expect(box.get_by_label("Approval requested")).to_have_count(0)  # not for on-call
    box.get_by_label("Your e-mail address").fill("omar@example.com")
    box.get_by_label("Action needs a human").check()
    box.get_by_role("button", name="Save e-mail notifications").click()
    expect(page.get_by_role("status").first).to_contain_text("You get 1 kind of notification")
    expect(page.locator("#email-preferences").get_by_label("Action needs a human")).to_be_checked()
    assert user(world.oncall).preference.email_events == ["action.needs_human"]


# --- part 7: bulk with a preview -----------------------------------------------------------------


def _wills(page) -> dict:
    """What the preview on screen says each item will do, once the preview has loaded (a
    click on Preview or Confirm starts a navigation; it does not wait for its page)."""
    expect(page.locator("#bulk-items tbody tr").first).to_be_attached()
    return dict(
        page.locator("#bulk-items tbody tr").evaluate_all(
            "rows => rows.map(r => [r.dataset.item, r.dataset.will])"
        )
    )


def _dids(page) -> dict:
    """What the result page says each item did, once it has loaded."""
    expect(page.locator("#bulk-items tbody tr[data-did]").first).to_be_attached()
    return dict(
        page.locator("#bulk-items tbody tr").evaluate_all(
            "rows => rows.map(r => [r.dataset.item, r.dataset.did])"
        )
    )


def test_a_bulk_preview_matches_what_the_confirm_does(
    live_db, downstream, new_page, console_server, settings
):
    settings.RESOLVE_READ_MAX_AGE_SECONDS = 600  # the reads stay fresh however slow the machine
    world = make_world(downstream)
    run = start_run(world)
    first = make_needs_human(world, run=run)
    second = make_needs_human(world, run=run)
    held = make_needs_human(world, run=run)
    awaiting = make_blocked(world, run=run)  # not resolvable: skipped
    colleague = add_operator(world, "oncall2", Role.ONCALL)
    decisions.action_claim_for_operator(held, user=user(colleague), actor=operator_actor(colleague))
    page = sign_in(new_page(), console_server, world.oncall)
    for a in (first, second, held, awaiting):
        page.locator(f"#pick-{a.pk}").check()
    expect(page.locator("#bulk-count")).to_have_text("4 selected")
    # A live refresh (a new item arrives) keeps the ticks.
    newcomer = make_needs_human(world, run=run)
    expect(page.locator(f"#row-{newcomer.pk}")).to_be_visible(timeout=8_000)
    for a in (first, second, held, awaiting):
        expect(page.locator(f"#pick-{a.pk}")).to_be_checked()
    expect(page.locator(f"#pick-{newcomer.pk}")).not_to_be_checked()

    page.get_by_label("With the selected").select_option("resolve:failed")
    page.get_by_label(re.compile("^Reason")).fill("Helpdesk shows none of these closed.")
    page.get_by_role("button", name="Preview").click()
    expect(
        page.get_by_role("heading", name=re.compile("Preview: resolve as failed"))
    ).to_be_visible()
    expect(page.locator("#bulk-summary")).to_contain_text("2 of 4")
    preview = _wills(page)
    assert preview == {
        str(first.pk): "resolve_failed",
        str(second.pk): "resolve_failed",
        str(held.pk): "skip",
        str(awaiting.pk): "skip",
    }
    expect(page.locator(f"#bulk-{held.pk}")).to_contain_text(f"Claimed by {colleague.username}")
    expect(page.locator(f"#bulk-{awaiting.pk}")).to_contain_text(
        "Only an unknown or needs_human action can be resolved"
    )
    assert Action.objects.get(pk=first.pk).state == "needs_human"  # nothing changed yet

    page.get_by_role("button", name="Confirm: resolve 2").click()
    expect(page.get_by_role("status").first).to_contain_text("Done for 2 of 4, as previewed")
    assert _dids(page) == preview  # what the confirm did is what the preview said
    states = {a.pk: Action.objects.get(pk=a.pk) for a in (first, second, held, awaiting)}
    assert states[first.pk].state == states[second.pk].state == "failed"
    assert states[first.pk].resolution_reason == "Helpdesk shows none of these closed."
    assert states[held.pk].state == "needs_human" and states[awaiting.pk].state == "blocked"
    for a in (first, second):
        assert AuditEvent.objects.filter(verb="action.failed", object_id=str(a.pk)).count() == 1
    batch = AuditEvent.objects.get(verb="bulk.apply", tenant=world.tenant)
    assert [i["did"] for i in batch.after["items"]] == list(preview.values())
    page.reload()  # the result page is a GET: a reload does nothing again
    expect(page.locator("#bulk-items tbody tr")).to_have_count(4)
    assert AuditEvent.objects.filter(verb="bulk.apply", tenant=world.tenant).count() == 1

    # Re-check together: each read once, recorded.
    page.goto(console_server("/"))
    reads = held.reconciliations.count()
    # The ticks of the items still open are kept across the preview and the result.
    expect(page.locator(f"#pick-{held.pk}")).to_be_checked()
    expect(page.locator(f"#pick-{awaiting.pk}")).to_be_checked()
    page.locator(f"#pick-{awaiting.pk}").uncheck()
    page.locator(f"#pick-{held.pk}").check()
    page.locator(f"#pick-{newcomer.pk}").check()
    page.get_by_label("With the selected").select_option("recheck")
    page.get_by_role("button", name="Preview").click()
    assert set(_wills(page).values()) == {"recheck"}
    page.get_by_role("button", name="Confirm: re-check 2").click()
    assert set(_dids(page).values()) == {"recheck"}
    assert held.reconciliations.count() == reads + 1


def test_a_bulk_confirm_after_the_selection_changed_does_nothing_and_previews_again(
    live_db, downstream, new_page, console_server, settings
):
    settings.RESOLVE_READ_MAX_AGE_SECONDS = 600
    world = make_world(downstream)
    run = start_run(world)
    first = make_needs_human(world, run=run)
    second = make_needs_human(world, run=run)
    page = sign_in(new_page(), console_server, world.oncall)
    page.locator(f"#pick-{first.pk}").check()
    page.locator(f"#pick-{second.pk}").check()
    page.get_by_label("With the selected").select_option("resolve:failed")
    page.get_by_label(re.compile("^Reason")).fill("Both still open in the helpdesk.")
    page.get_by_role("button", name="Preview").click()
    assert set(_wills(page).values()) == {"resolve_failed"}
    # Meanwhile a colleague settles one of them.
    decisions.action_resolve(
        first, outcome="succeeded", reason="it was, by hand", actor=operator_actor(world.admin)
    )
    page.get_by_role("button", name="Confirm: resolve 2").click()
    expect(page.get_by_role("status").first).to_contain_text("nothing was done")
    assert _wills(page) == {str(first.pk): "skip", str(second.pk): "resolve_failed"}
    assert Action.objects.get(pk=second.pk).state == "needs_human"
    assert not AuditEvent.objects.filter(verb="bulk.apply", tenant=world.tenant).exists()
    page.get_by_role("button", name="Confirm: resolve 1").click()
    assert _dids(page) == {str(first.pk): "skip", str(second.pk): "resolve_failed"}
    assert Action.objects.get(pk=second.pk).state == "failed"


def test_a_bulk_replay_preview_names_the_tools_and_ledger_hits_and_the_replay_proves_it(
    live_db, downstream, worker, new_page, console_server
):
    world = make_world(downstream)
    allowed = make_failed_run_without_tools(world)
    unsettled = start_run(world)
    forced = start_run(world, config={"batch": 7})
    t = tool(world)
    kept, undone = f"T-{uuid.uuid4().hex[:6]}", f"T-{uuid.uuid4().hex[:6]}"
    for target in (kept, undone):
        a = propose(world, forced, t, target, {"status": "closed"}, key=f"evt-7:{target}")
        dispatch.action_dispatch(a.pk)
        wait_state(a.pk, "succeeded")
    ledger_revoke(
        LedgerEntry.objects.get(tenant=world.tenant, key=f"evt-7:{undone}"),
        actor=operator_actor(world.admin),
        reason="reopened by hand",
    )
    runtime.run_finish(
        forced, status="error", tools_called=["update_ticket"], actor=agent_of(world)
    )
    page = sign_in(new_page(), console_server, world.admin, path="/runs/")
    for r in (allowed, unsettled, forced):
        page.locator(f"#pick-{r.pk}").check()
    page.get_by_label(re.compile("Force where the rule refuses")).check()
    page.get_by_label(re.compile("^Reason")).fill(
        "Ticket updates are keyed; the ledger guards them."
    )
    page.get_by_role("button", name="Preview replay of the selected").click()
    preview = _wills(page)
    assert preview == {
        str(allowed.pk): "replay",
        str(unsettled.pk): "skip",
        str(forced.pk): "force_replay",
    }
    row = page.locator(f"#bulk-{forced.pk}")
    expect(row.locator(".tools-line")).to_contain_text("update_ticket")
    # The dry run, per key: the ledger hands back the recorded success; the revoked key
    # would be sent again.
    expect(row.locator(f'li[data-key="evt-7:{kept}"]')).to_contain_text("recorded success")
    expect(row.locator(f'li[data-key="evt-7:{kept}"]')).to_contain_text("Not sent again")
    expect(row.locator(f'li[data-key="evt-7:{undone}"]')).to_contain_text("sent again")
    expect(row.locator(".dry-summary")).to_contain_text("1 key would be sent again")
    expect(page.locator(f"#bulk-{unsettled.pk}")).to_contain_text("has not settled yet")

    page.get_by_role("button", name="Confirm: replay 2").click()
    assert _dids(page) == preview
    replay = Run.objects.get(replay_of=forced)
    assert Run.objects.filter(replay_of=allowed).count() == 1
    assert not Run.objects.filter(replay_of=unsettled).exists()

    # The runtime runs the forced replay with the same stable keys: the preview's ledger
    # hit is a hit (nothing sent), its "sent again" is a new effect.
    agent = world.agent.client()
    claimed = {agent.post("/api/v1/runs/claim", format="json").json()["id"] for _ in range(2)}
    assert str(replay.pk) in claimed
    answers = {}
    for target in (kept, undone):
        answers[target] = world.propose(
            replay.pk,
            f"evt-7:{target}",
            tool="update_ticket",
            target=target,
            desired_state={"status": "closed"},
        )
    assert answers[kept].status_code == 200 and answers[kept].json()["replayed"] is True
    assert answers[undone].status_code == 201 and answers[undone].json()["replayed"] is False
    world.wait_action(answers[undone].json()["id"])
    assert downstream.mutations(kept) == 1 and downstream.mutations(undone) == 2


# --- part 4: the run page refreshes itself ----------------------------------------------------


def test_the_run_page_follows_the_run_and_keeps_a_typed_force_reason(
    live_db, downstream, worker, new_page, console_server
):
    world = make_world(downstream)
    run = start_run(world)
    action = make_needs_human(world, run=run)
    runtime.run_finish(run, status="error", tools_called=["update_ticket"], actor=agent_of(world))
    page = sign_in(new_page(), console_server, world.admin, path=f"/runs/{run.pk}/")
    expect(page.locator("#replay-verdict")).to_contain_text("Replay refused without force")
    reason = "The customer confirmed nothing was closed"
    page.get_by_label(re.compile("^Reason")).fill(reason)

    # A colleague resolves its one call as failed: the actions follow, and the replay panel
    # is replaced in place. Its one key would only hand back that recorded failure, so no
    # replay is offered as a fix; the typed reason stays in view.
    decisions.action_resolve(
        action, outcome="failed", reason="not applied", actor=operator_actor(world.oncall)
    )
    expect(page.locator("#run-actions")).to_contain_text("failed", timeout=12_000)
    notice = page.locator("#controls-notice")
    expect(notice).to_contain_text("The replay verdict of this run changed")
    expect(notice).to_contain_text(reason)
    expect(page.locator("#replay-futile")).to_contain_text("A replay is not offered")
    expect(page.locator(f'li[data-key="{action.idempotency_key}"]')).to_contain_text(
        "recorded failure"
    )
    expect(page.get_by_role("button", name="Replay this run")).to_have_count(0)
    expect(page.get_by_role("button", name="Force replay")).to_have_count(0)

    # The key is revoked (the close is to be tried again): now a replay would send it again,
    # and the panel offers the replay, saying so.
    ledger_revoke(
        LedgerEntry.objects.get(tenant=world.tenant, key=action.idempotency_key),
        actor=operator_actor(world.admin),
        reason="try the close again",
    )
    expect(page.locator(f'li[data-key="{action.idempotency_key}"]')).to_contain_text(
        "sent again", timeout=12_000
    )
    page.get_by_role("button", name="Replay this run").click()
    expect(page.get_by_role("status").first).to_contain_text("1 key would be sent again")
    expect(page.locator("#run-status")).to_have_text("pending")
    replay = Run.objects.get(replay_of=run)

    # The runtime takes the replay and finishes it: the page says so without a reload.
    agent = world.agent.client()
    assert agent.post("/api/v1/runs/claim", format="json").json()["id"] == str(replay.pk)
    expect(page.locator("#run-status")).to_have_text("running", timeout=8_000)
    agent.post(
        f"/api/v1/runs/{replay.pk}/finish", {"status": "success", "tools_called": []}, format="json"
    )
    expect(page.locator("#run-status")).to_have_text("success", timeout=8_000)
    expect(page.locator("#tools-executed")).to_contain_text("None")
    page.goto(console_server(f"/runs/{run.pk}/"))
    expect(page.locator("#lineage")).to_contain_text("success")
