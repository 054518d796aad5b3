"""Issue 12, parts 3 to 8, in headless Chromium: acknowledge, resolve feeds replay, the
approver's context, fresh decisions, find anything, the corners. (Typing kept through live
updates: test_live_screen.py; phones: test_phone.py; four eyes: test_replay_truth.py.)"""

import re
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from core.models import AuditEvent
from runs import decisions, runtime
from runs.models import Action
from tests.builders import make_world
from tests.console.conftest import (
    PASSWORD,
    make_awaiting,
    make_needs_human,
    operator_actor,
    sign_in,
    start_run,
)

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}


# --- part 7: acknowledge blocked; resolve feeds replay --------------------------------------


def test_oncall_acknowledges_a_blocked_action_and_it_leaves_the_open_counts(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    action = make_awaiting(world)
    decisions.approval_request_deny(
        action.approval_request, reason="Not this one.", actor=operator_actor(world.approver)
    )
    page = sign_in(new_page(), console_server, world.oncall)
    expect(page.locator('[data-count="blocked"]')).to_have_text("1")
    page.get_by_role("link", name=action.target).click()
    status = page.locator(".status-line")
    expect(status).to_contain_text("approval denied")
    assert status.inner_text().count("approval denied") == 1  # said once
    expect(page.get_by_role("button", name="Claim", exact=True)).to_have_count(0)
    page.get_by_label(re.compile("^Note")).fill("Agent was told; it will ask again.")
    page.get_by_role("button", name="Acknowledge").click()
    expect(page.get_by_role("status").first).to_contain_text("Acknowledged")
    expect(page.locator("#acknowledged")).to_contain_text("Agent was told")
    page.get_by_role("link", name="Queue").first.click()
    expect(page.locator('[data-count="blocked"]')).to_have_text("0")
    expect(page.locator(f"#row-{action.pk}")).to_have_count(0)
    # still findable: from its run
    page.goto(console_server(f"/runs/{action.run_id}/"))
    expect(page.get_by_role("link", name=action.target)).to_be_visible()


def test_resolve_as_failed_feeds_the_run_replay_verdict(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    run = start_run(world)
    action = make_needs_human(world, run=run)
    runtime.run_finish(
        run, status="error", tools_called=["update_ticket"], actor=operator_actor(world.admin)
    )
    page = sign_in(new_page(), console_server, world.admin, path=f"/runs/{run.pk}/")
    verdict = page.locator("#replay-verdict")
    expect(verdict).to_contain_text("Replay refused without force")
    expect(page.get_by_role("button", name="Replay this run")).to_have_count(0)

    page.locator("#run-actions").get_by_role("link", name=action.target).click()
    page.get_by_label("Reason").fill("The ticket is still open: the close never landed.")
    page.get_by_role("button", name="Resolve as failed").click()
    expect(page.locator("#action-state")).to_have_text("failed")

    page.goto(console_server(f"/runs/{run.pk}/"))
    expect(verdict).to_contain_text("Replay allowed")
    expect(verdict).to_contain_text("resolved every call of update_ticket by this run as failed")
    expect(page.locator("#not-applied")).to_contain_text("update_ticket")
    # Yet the same key would only hand back that recorded failure: the dry run says so, and
    # a replay is not offered as a fix.
    expect(page.locator(f'li[data-key="{action.idempotency_key}"]')).to_contain_text(
        "recorded failure"
    )
    expect(page.locator("#replay-futile")).to_be_visible()
    expect(page.get_by_role("button", name="Replay this run")).to_have_count(0)


# --- part 6: approver context -----------------------------------------------------------------


def test_approver_lands_on_approvals_and_sees_reason_run_and_target_state(
    live_db, downstream, new_page, console_server
):
    from tests.console.conftest import propose, tool

    world = make_world(downstream)
    run = start_run(world)
    t = tool(world, "close_ticket", requires_approval=True)
    target = f"T-{run.pk.hex[:6]}"
    downstream.seed(target, {"status": "open", "owner": "ana"}, version=7)
    action = propose(
        world, run, t, target, {"status": "closed"}, 7, reason="Customer confirmed the fix."
    )
    runtime.run_finish(run, status="error", tools_called=[], actor=operator_actor(world.admin))

    page = new_page()
    page.goto(console_server("/login/"))  # no ?next: the default landing
    page.get_by_label("Username").fill(world.approver.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/approvals/$"))
    row = page.locator(f"#request-{action.approval_request_id}")
    expect(row).to_contain_text("The agent says: “Customer confirmed the fix.”")
    expect(row).to_contain_text("The run has already ended (error)")
    expect(row.get_by_role("link", name=f"run {str(run.pk)[:8]}")).to_be_visible()
    state = row.locator(f'[data-state-for="{action.approval_request_id}"]')
    expect(state).to_contain_text("version 7, as the request expects")
    expect(state).to_contain_text("would change status")
    expect(state).to_contain_text(re.compile(r'status.*"open".*"closed"'))
    expect(row).to_contain_text("expires in")


# --- part 3: fresh decisions ---------------------------------------------------------------


def test_opening_an_action_rereads_and_the_diff_age_ticks(
    live_db, downstream, new_page, console_server, settings
):
    world = make_world(downstream)
    action = make_needs_human(world)
    reads_before = action.reconciliations.count()
    settings.CONSOLE_REREAD_AFTER_SECONDS = 0  # any read is old enough to re-read on opening
    page = sign_in(new_page(), console_server, world.oncall, path=f"/actions/{action.pk}/")
    # The page's own read is the reconciler's: opening a page is not a decision, and
    # writes nothing under the viewer's name.
    for _ in range(30):
        if action.reconciliations.count() > reads_before:
            break
        page.wait_for_timeout(200)
    assert action.reconciliations.count() == reads_before + 1
    latest = action.reconciliations.order_by("-at", "-id").first()
    assert latest.actor == {"kind": "system", "name": "reconciler"}
    expect(page.locator("#action-live")).to_contain_text("by system:reconciler")
    assert not AuditEvent.objects.filter(
        object_id=str(action.pk), actor_name=world.oncall.username
    ).exists()
    age = page.locator("#diff .read-age")
    first = age.inner_text()
    # It redraws on its own (a tick a second; a loaded machine may skip one).
    expect(age).not_to_have_text(first, timeout=6_000)


def test_a_resolve_on_a_stale_read_asks_for_a_fresh_read_and_keeps_the_reason(
    live_db, downstream, new_page, console_server, settings
):
    world = make_world(downstream)
    action = make_needs_human(world)
    settings.CONSOLE_REREAD_AFTER_SECONDS = 3600  # no automatic re-read here
    settings.RESOLVE_READ_MAX_AGE_SECONDS = 2
    page = sign_in(new_page(), console_server, world.oncall, path=f"/actions/{action.pk}/")
    expect(page.locator(".stale-warning")).to_be_visible(timeout=6_000)
    reason = "Helpdesk shows it closed."
    page.get_by_label("Reason").fill(reason)
    page.get_by_role("button", name="Resolve as succeeded").click()
    expect(page.locator("#resolve-stale")).to_contain_text("Re-check now")
    expect(page.get_by_label("Reason")).to_have_value(reason)
    assert Action.objects.get(pk=action.pk).state == "needs_human"

    settings.RESOLVE_READ_MAX_AGE_SECONDS = 60
    page.get_by_role("button", name="Re-check now").click()
    expect(page.get_by_role("status").first).to_contain_text("Re-checked")
    expect(page.get_by_label("Reason")).to_have_value(reason)  # the draft came back
    page.get_by_role("button", name="Resolve as succeeded").click()
    expect(page.locator("#action-state")).to_have_text("succeeded")
    done = Action.objects.get(pk=action.pk)
    assert done.resolved_on_read_id == done.reconciliations.order_by("at", "id").last().pk


# --- part 4: find anything -----------------------------------------------------------------------


def test_search_finds_each_kind_of_id_and_deep_links(live_db, downstream, new_page, console_server):
    from tests.console.conftest import propose, tool

    world = make_world(downstream)
    run = start_run(world)
    key = f"refund:order-{run.pk.hex[:6]}"
    target = f"T-{run.pk.hex[:6]}"
    t = tool(world)
    action = propose(world, run, t, target, {"status": "closed"}, key=key)
    second = propose(world, run, t, target, {"status": "open"})  # same target, other key
    page = sign_in(new_page(), console_server, world.oncall)

    def search(text):
        box = page.get_by_role("searchbox", name="Search", exact=True)
        box.fill(text)
        box.press("Enter")

    search(str(action.pk))
    expect(page).to_have_url(re.compile(f"/actions/{action.pk}/$"))
    search(str(run.pk))
    expect(page).to_have_url(re.compile(f"/runs/{run.pk}/$"))
    search(str(run.pk)[:8])  # the short id the console shows
    expect(page).to_have_url(re.compile(f"/runs/{run.pk}/$"))
    search(key)
    expect(page).to_have_url(re.compile(f"/actions/{action.pk}/$"))
    search(target)  # two actions on this target: a list of both
    results = page.locator("#search-results")
    expect(results).to_contain_text("2 matches")
    expect(results.get_by_role("link", name=target)).to_have_count(2)
    results.get_by_role("link", name=target).first.click()
    expect(page).to_have_url(re.compile(f"/actions/({action.pk}|{second.pk})/$"))

    outsider = sign_in(new_page(), console_server, world.outsider)
    outsider.get_by_role("searchbox", name="Search", exact=True).fill(str(action.pk))
    outsider.get_by_role("searchbox", name="Search", exact=True).press("Enter")
    expect(outsider.locator("#search-results")).to_contain_text("Nothing matches")


def test_all_actions_lists_settled_ones_with_filters_and_csv(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    run = start_run(world)
    needs = make_needs_human(world, run=run)
    decisions.action_resolve(
        needs, outcome="failed", reason="checked", actor=operator_actor(world.oncall)
    )
    awaiting = make_awaiting(world, run=run)
    page = sign_in(new_page(), console_server, world.oncall)
    page.get_by_role("link", name="All actions").click()
    expect(page.locator(f"#action-row-{needs.pk}")).to_contain_text("failed")
    expect(page.locator(f"#action-row-{awaiting.pk}")).to_be_visible()
    page.get_by_label("State").select_option("failed")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.locator(f"#action-row-{needs.pk}")).to_be_visible()
    expect(page.locator(f"#action-row-{awaiting.pk}")).to_have_count(0)
    with page.expect_download() as download:
        page.locator("#actions-csv").click()
    body = Path(download.value.path()).read_text()
    assert str(needs.pk) in body and str(awaiting.pk) not in body


# --- part 8: corners -----------------------------------------------------------------------------


def test_new_pages_and_the_404_have_no_axe_violations_at_desktop_width(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    needs = make_needs_human(world)
    page = sign_in(new_page(), console_server, world.admin)
    axe = Axe()
    found = {}
    for path in [
        "/actions/",
        f"/search/?q={needs.target}&list=1",
        "/search/",
        "/no/such/page/",
        "/runs/00000000-0000-0000-0000-000000000000/",
    ]:
        response = page.goto(console_server(path))
        if path.startswith(("/no/", "/runs/0")):
            assert response.status == 404
            expect(page.get_by_role("heading", name="Not found")).to_be_visible()
            expect(page.get_by_role("navigation", name="Main")).to_be_visible()
        if violations := axe.run(page).response["violations"]:
            found[path] = [(v["id"], [n["target"] for n in v["nodes"]][:3]) for v in violations]
    assert not found, found


# --- part 5: counts in the navigation ---------------------------------------------------------


def test_nav_counts_and_the_tab_title_update_live(live_db, downstream, new_page, console_server):
    world = make_world(downstream)
    make_awaiting(world)
    page = sign_in(new_page(), console_server, world.admin, path="/runs/")
    expect(page.locator("#nav-count-approvals")).to_have_text(re.compile(r"^\W*1 pending$"))
    expect(page.locator("#nav-count-queue")).to_have_text("")
    assert page.title().startswith("(1) Runs")

    make_needs_human(world)
    make_awaiting(world)
    expect(page.locator("#nav-count-queue")).to_contain_text("1", timeout=8_000)
    expect(page.locator("#nav-count-approvals")).to_contain_text("2", timeout=8_000)
    expect(page).to_have_title(re.compile(r"^\(3\) Runs"))

    approver = sign_in(new_page(), console_server, world.approver, path="/runs/")
    expect(approver.locator("#nav-count-queue")).to_have_count(0)  # not on-call: not shown
    expect(approver.locator("#nav-count-approvals")).to_contain_text("2")


def test_after_a_resolve_next_item_and_the_keyboard_shortcuts(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    run = start_run(world)
    first = make_needs_human(world, run=run)
    second = make_needs_human(world, run=run)
    page = sign_in(new_page(), console_server, world.oncall)
    page.keyboard.press("?")
    expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_hidden()
    expect(page.locator(f"#open-{first.pk}")).to_be_visible()

    focused = "id => document.activeElement && document.activeElement.id === id"
    page.keyboard.press("j")
    page.wait_for_function(focused, arg=f"open-{first.pk}", timeout=5000)
    page.keyboard.press("j")
    page.wait_for_function(focused, arg=f"open-{second.pk}", timeout=5000)
    page.keyboard.press("k")
    page.keyboard.press("o")
    expect(page).to_have_url(re.compile(f"/actions/{first.pk}/$"))
    reads = first.reconciliations.count()
    page.keyboard.press("r")
    expect(page.get_by_role("status").first).to_contain_text("Re-checked")
    assert first.reconciliations.count() == reads + 1

    page.get_by_label("Reason").fill("Closed by hand in the helpdesk.")
    page.get_by_role("button", name="Resolve as succeeded").click()
    expect(page.locator("#action-state")).to_have_text("succeeded")
    expect(page.locator("#next-item")).to_contain_text(second.target)
    page.keyboard.press("n")
    expect(page).to_have_url(re.compile(f"/actions/{second.pk}/$"))


def test_without_javascript_a_validation_error_redirects_and_a_reload_is_harmless(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    action = make_needs_human(world)
    page = sign_in(
        new_page(java_script_enabled=False),
        console_server,
        world.oncall,
        path=f"/actions/{action.pk}/",
    )
    page.get_by_label("Reason").fill("   ")  # passes `required`, fails the server's check
    page.get_by_role("button", name="Resolve as failed").click()
    expect(page).to_have_url(re.compile(f"/actions/{action.pk}/#resolve-form$"))
    expect(page.locator("#resolve-form")).to_contain_text("Say why")
    response = page.reload()
    assert response.status == 200
    expect(page.locator("#resolve-form")).not_to_contain_text("Say why")


def test_audit_filters_are_lists_and_errors_are_in_words(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    action = make_needs_human(world)
    decisions.action_resolve(
        action, outcome="failed", reason="checked", actor=operator_actor(world.oncall)
    )
    page = sign_in(new_page(), console_server, world.admin, path="/audit/")
    page.get_by_label("Actor").select_option(f"operator:{world.oncall.username}")
    page.get_by_label("Verb").select_option(label="action (all of them)")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("tbody tr[data-verb]")
    expect(rows.first).to_be_visible()
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.verb)")) == {"action.failed"}
    page.goto(console_server("/audit/?since=yesterday"))
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("From (UTC): Give the start as a date and time")
    expect(alert).not_to_contain_text("since")


def test_idempotency_conflicts_are_listed_side_by_side(
    live_db, downstream, new_page, console_server
):
    from core.errors import IdempotencyConflict
    from runs.propose import action_propose
    from tests.console.conftest import agent_of, propose, tool

    world = make_world(downstream)
    run = start_run(world)
    t = tool(world)
    key = f"evt-{run.pk.hex[:6]}:update_ticket"
    held = propose(world, run, t, "T-1", {"status": "closed"}, key=key)
    with pytest.raises(IdempotencyConflict):
        action_propose(
            run=run,
            tool=t,
            target="T-1",
            desired_state={"status": "reopened"},
            expected_version=None,
            idempotency_key=key,
            actor=agent_of(world),
        )
    page = sign_in(new_page(), console_server, world.oncall, path="/actions/")
    page.get_by_role("link", name="Idempotency conflicts").click()
    panel = page.locator("section.conflict").first
    expect(panel).to_contain_text(key)
    expect(panel.get_by_role("link", name=f"action {str(held.pk)[:8]}")).to_be_visible()
    differing = panel.locator('tr[data-field="desired_state"]')
    expect(differing).to_have_class(re.compile("is-diff"))
    expect(differing).to_contain_text('"reopened"')
    expect(panel.locator('tr[data-field="target"]')).to_have_class(re.compile("is-same"))


def test_each_operator_chooses_a_time_zone_and_the_audit_range_uses_it(
    live_db, downstream, new_page, console_server
):
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    from core.models import AuditEvent

    world = make_world(downstream)
    action = make_needs_human(world)
    page = sign_in(new_page(), console_server, world.admin, path="/audit/")
    expect(page.locator("footer")).to_contain_text("Times are in UTC")
    page.get_by_role("link", name="change").click()
    page.get_by_label("Show times in").select_option("Asia/Kolkata")  # UTC+05:30, no DST
    page.get_by_role("button", name="Save", exact=True).click()  # the time zone's
    expect(page.get_by_role("status").first).to_contain_text("Asia/Kolkata")

    event = AuditEvent.objects.filter(object_id=str(action.pk)).order_by("-at").first()
    local = event.at.astimezone(ZoneInfo("Asia/Kolkata"))
    page.goto(console_server(f"/audit/?object={action.pk}"))
    expect(page.locator("footer")).to_contain_text("Times are in Asia/Kolkata")
    expect(page.get_by_label("From (Asia/Kolkata)")).to_be_visible()
    expect(page.locator("tbody")).to_contain_text(f"{local:%H:%M:%S}")
    # the range is read in the operator's zone: from one minute after the event, nothing
    after = (local + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
    page.goto(console_server(f"/audit/?object={action.pk}&since={after}"))
    expect(page.locator("tbody")).to_contain_text("No events match.")
    before = (local - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
    page.goto(console_server(f"/audit/?object={action.pk}&since={before}"))
    expect(page.locator("tbody tr[data-verb]").first).to_be_visible()

    other = sign_in(new_page(), console_server, world.oncall)  # a colleague: still UTC
    expect(other.locator("footer")).to_contain_text("Times are in UTC")


def test_requests_over_the_approval_sla_are_highlighted(
    live_db, downstream, new_page, console_server
):
    from core.services import tenant_settings_update

    world = make_world(downstream)
    old = make_awaiting(world)
    tenant_settings_update(world.tenant, actor=operator_actor(world.admin), approval_sla_seconds=2)
    page = sign_in(new_page(), console_server, world.approver, path="/approvals/")
    row = page.locator(f"#request-{old.approval_request_id}")
    expect(row).to_have_class(re.compile("over-sla"), timeout=8_000)  # the live list follows
    expect(row).to_contain_text("over the SLA")
    tenant_settings_update(world.tenant, actor=operator_actor(world.admin), approval_sla_seconds=0)
    expect(row).not_to_have_class(re.compile("over-sla"), timeout=8_000)  # off again
