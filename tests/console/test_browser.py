"""The console in headless Chromium: the operators' journeys, end to end, against the live
server, the engine's own services and the demo downstream over HTTP; and axe-core on every
main page.

These tests do not start the suite's shared Celery worker: where a worker would dispatch,
the test calls the same service (`runs.engine.dispatch.action_dispatch`) itself."""

import re
import time

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from core.models import Role
from runs.engine import dispatch
from runs.models import Action, Replay, Run
from tests.builders import make_world
from tests.console.conftest import (
    PASSWORD,
    add_operator,
    make_awaiting,
    make_failed_run_with_tools,
    make_needs_human,
    make_unknown,
    sign_in,
    wait_state,
)

pytestmark = pytest.mark.browser

SERIOUS = {"serious", "critical"}


def test_approver_grants_a_pending_request_and_the_action_succeeds(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    action = make_awaiting(world)
    page = sign_in(new_page(), console_server, world.approver)
    page.get_by_role("link", name="Approvals").click()
    row = page.locator(f"#request-{action.approval_request_id}")
    expect(row).to_contain_text(action.target)
    expect(row).to_contain_text("Your refund is on its way.")
    row.get_by_label("Valid for").select_option(label="15 minutes")
    row.get_by_role("button", name="Grant").click()
    expect(page.get_by_role("status")).to_contain_text("The action is queued for dispatch")
    expect(page.locator(f"#request-{action.approval_request_id}")).to_have_count(0)

    page.get_by_role("link", name="Queue").click()
    expect(page.locator("#queue-table")).to_be_visible()
    expect(page.locator(f"#row-{action.pk}")).to_have_count(0)  # it left the queue

    page.goto(console_server(f"/actions/{action.pk}/"))
    # Queued, unless the suite's shared Celery worker (started by an earlier test, or not)
    # took it already. What a worker does with the wake-up the grant sent is done here
    # through the same service (claim, consume the approval, call the tool, settle) when no
    # worker did; either way the open page must follow it live, without a reload.
    expect(page.locator("#action-state")).to_have_text(re.compile("queued|dispatching|succeeded"))
    dispatch.action_dispatch(action.pk)  # a no-op when a worker claimed it first
    expect(page.locator("#action-state")).to_have_text("succeeded", timeout=10_000)
    expect(page.locator("#action-live")).to_contain_text("Approval consumed")
    assert Action.objects.get(pk=action.pk).state == "succeeded"


def test_oncall_resolves_a_needs_human_action_and_the_audit_shows_it(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    action = make_needs_human(world)
    page = sign_in(new_page(), console_server, world.oncall)
    page.get_by_role("link", name=action.target).click()
    mismatch = page.locator('tr[data-field="status"]')
    expect(mismatch).to_have_class(re.compile("is-diff"))
    expect(mismatch).to_contain_text("differs")  # said in words, not only in red
    expect(mismatch.locator("mark")).to_have_text('"open"')
    expect(page.locator('tr[data-field="priority"]')).to_contain_text("equal")

    page.get_by_role("button", name="Resolve as failed").click()  # no reason yet
    assert page.evaluate("document.querySelector('#resolve-reason').validity.valueMissing")
    page.get_by_label("Reason").fill(
        "Helpdesk shows the ticket still open; the close never landed."
    )
    page.get_by_role("button", name="Resolve as failed").click()
    expect(page.locator("#action-state")).to_have_text("failed")
    expect(page.get_by_role("status")).to_contain_text("Resolved as failed")

    admin = sign_in(new_page(), console_server, world.admin, path="/audit/")
    admin.get_by_label("Object id").fill(str(action.pk))
    admin.get_by_role("button", name="Filter").click()
    event = admin.locator('tr[data-verb="action.failed"]')
    expect(event).to_contain_text(f"operator:{world.oncall.username}")
    expect(event).to_contain_text("the close never landed")


def test_queue_left_open_shows_a_new_unknown_action_within_5_seconds(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    for _ in range(20):
        make_unknown(world)
    page = sign_in(new_page(), console_server, world.oncall)
    page.get_by_label("Tool").select_option("update_ticket")  # an open filter (HTMX, no reload)
    page.wait_for_url(re.compile(r"tool=update_ticket"))
    expect(page.locator("#queue-rows tr")).to_have_count(20)
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    scrolled = page.evaluate("window.scrollY")
    assert scrolled > 0
    focused = page.locator("#queue-rows a").last
    focused.focus()
    focused_id = focused.get_attribute("id")

    newcomer = make_unknown(world)
    committed = time.monotonic()
    expect(page.locator(f"#row-{newcomer.pk}")).to_be_visible(timeout=5_000)
    assert time.monotonic() - committed <= 5
    expect(page.locator(f"#row-{newcomer.pk}")).to_contain_text("unknown")
    assert page.evaluate("window.scrollY") >= scrolled  # still where the operator was
    assert page.get_by_label("Tool").input_value() == "update_ticket"
    assert page.evaluate("document.activeElement.id") == focused_id  # keyboard place kept
    expect(page.locator('[data-count="unknown"]')).to_have_text("21")


def test_a_second_oncall_sees_the_claim(live_db, downstream, new_page, console_server):
    world = make_world(downstream)
    action = make_needs_human(world)
    second = add_operator(world, "oncall2", Role.ONCALL)
    url = f"/actions/{action.pk}/"
    watcher = sign_in(new_page(), console_server, second, path=url)
    expect(watcher.get_by_role("button", name="Claim")).to_be_visible()

    first = sign_in(new_page(), console_server, world.oncall, path=url)
    first.get_by_role("button", name="Claim").click()
    expect(first.locator("#claim-banner")).to_contain_text("You hold this action")

    # the second on-call's open page learns it without a reload, buttons included
    expect(watcher.locator("#claim-banner")).to_contain_text(
        f"Claimed by {world.oncall.username}", timeout=5_000
    )
    expect(watcher.get_by_role("button", name="Claim")).to_have_count(0)
    expect(watcher.get_by_label(re.compile("Resolve despite"))).to_be_visible()
    watcher.goto(console_server("/"))
    expect(watcher.locator(f"#row-{action.pk}")).to_contain_text(world.oncall.username)


def test_admin_force_replays_from_the_run_page(live_db, downstream, new_page, console_server):
    world = make_world(downstream)
    run = make_failed_run_with_tools(world)
    page = sign_in(new_page(), console_server, world.admin, path=f"/runs/{run.pk}/")
    # the rule's verdict is on the page before anything is clicked
    expect(page.locator("#replay-verdict")).to_contain_text("Replay refused without force")
    expect(page.locator("#replay-verdict")).to_contain_text("this run called update_ticket")
    expect(page.get_by_role("button", name="Replay this run")).to_have_count(0)

    reason = "Tickets are guarded by their keys; the customer is waiting."
    page.get_by_label(re.compile("^Reason")).fill(reason)
    page.get_by_label(re.compile("Type the run id")).fill("not-it")
    page.get_by_role("button", name="Force replay").click()
    expect(page.locator("#force-form")).to_contain_text("That is not this run's id")
    expect(page.get_by_label(re.compile("^Reason"))).to_have_value(reason)  # kept for a retry
    assert not Run.objects.filter(replay_of=run).exists()

    page.get_by_label(re.compile("Type the run id")).fill(str(run.pk)[:8])
    page.get_by_role("button", name="Force replay").click()
    expect(page.get_by_role("status")).to_contain_text("Forced replay created")
    new_run = Run.objects.get(replay_of=run)
    expect(page.locator("#run-status")).to_have_text("pending")
    expect(page.locator("#lineage")).to_contain_text(str(run.pk)[:8])

    page.get_by_role("link", name="Replays").click()
    row = page.locator(f'tr[data-replay="{Replay.objects.get(new_run=new_run).pk}"]')
    expect(row).to_contain_text(f"operator:{world.admin.username}")
    expect(row).to_contain_text(reason)
    expect(row).to_contain_text("forced")
    expect(row).to_contain_text(str(run.pk)[:8])
    expect(row).to_contain_text(str(new_run.pk)[:8])


def test_pages_work_without_javascript(live_db, downstream, new_page, console_server):
    world = make_world(downstream)
    action = make_needs_human(world)
    page = sign_in(new_page(java_script_enabled=False), console_server, world.oncall)
    page.get_by_role("link", name=action.target).click()
    expect(page.locator('tr[data-field="status"]')).to_contain_text("differs")
    page.get_by_role("button", name="Claim").click()
    expect(page.locator("#claim-banner")).to_contain_text("You hold this action")
    page.get_by_label("Reason").fill("Checked by phone with the customer.")
    page.get_by_role("button", name="Resolve as succeeded").click()
    expect(page.locator("#action-state")).to_have_text("succeeded")
    page.get_by_role("link", name="Runs").click()
    expect(page.locator(f'tr[data-run="{action.run_id}"]')).to_be_visible()
    assert wait_state(action.pk, "succeeded").resolution == "resolved_by_operator"


def test_keyboard_signs_in_and_reaches_the_skip_link_first(live_db, new_page, console_server):
    world = make_world()
    page = new_page()
    page.goto(console_server("/login/"))
    page.keyboard.type(world.oncall.username)  # the username field has the focus
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(console_server("/"))
    expect(page.locator("#signed-in-user")).to_have_text(world.oncall.username)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"


def test_axe_finds_no_serious_or_critical_violations(live_db, downstream, new_page, console_server):
    world = make_world(downstream)
    needs = make_needs_human(world)
    awaiting = make_awaiting(world)
    make_unknown(world)
    run = make_failed_run_with_tools(world)
    page = sign_in(new_page(), console_server, world.admin)
    axe = Axe()
    pages = {
        "queue": "/",
        "action": f"/actions/{needs.pk}/",
        "action awaiting approval": f"/actions/{awaiting.pk}/",
        "approvals": "/approvals/",
        "audit": "/audit/",
        "runs": "/runs/",
        "run": f"/runs/{run.pk}/",
        "replays": "/replays/",
    }
    found = {}
    for name, path in pages.items():
        page.goto(console_server(path))
        results = axe.run(page)
        bad = [v for v in results.response["violations"] if v["impact"] in SERIOUS]
        if bad:
            found[name] = [
                (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in bad
            ]
    assert not found, found
