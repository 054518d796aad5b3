"""Decisions only on a live screen, in headless Chromium at 1280 and 390 px with 200-character
keys, targets and reasons: when a colleague acts or the object settles, the controls are
replaced in place (typed text kept), a refusal appears next to the control that caused it,
and approvals decided elsewhere leave the list."""

import re

import pytest
from playwright.sync_api import expect

from core.models import Role
from runs import decisions
from tests.builders import long_text, make_world
from tests.console.conftest import (
    add_operator,
    make_awaiting,
    make_needs_human,
    operator_actor,
    sign_in,
    start_run,
    user,
    wait_state,
)

pytestmark = pytest.mark.browser
WIDTHS = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]


def _overflow(page) -> int:
    return page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )


@pytest.mark.parametrize("viewport", WIDTHS, ids=["1280", "390"])
def test_a_colleagues_claim_then_resolve_replace_the_controls_in_place_and_keep_the_text(
    live_db, downstream, new_page, console_server, viewport
):
    world = make_world(downstream)
    action = make_needs_human(
        world, target=long_text("T-"), key=long_text("evt-"), reason=long_text("why-")
    )
    colleague = add_operator(world, "oncall2", Role.ONCALL)
    page = sign_in(
        new_page(viewport=viewport), console_server, world.oncall, path=f"/actions/{action.pk}/"
    )
    reason = "Called the customer: " + long_text("ticket-", 150)
    page.get_by_label("Reason").fill(reason)

    # A colleague claims it: the controls are the new ones at once (take over, resolve
    # despite the claim), and the text moved into them.
    decisions.action_claim_for_operator(
        action, user=user(colleague), actor=operator_actor(colleague)
    )
    notice = page.locator("#controls-notice")
    expect(notice).to_contain_text(f"{colleague.username} claimed this", timeout=6_000)
    expect(notice).to_contain_text(re.compile(r"\d+ s ago"))
    controls = page.locator("#action-controls")
    expect(
        controls.get_by_role("button", name=f"Take over from {colleague.username}")
    ).to_be_visible()
    expect(controls.get_by_role("button", name="Claim", exact=True)).to_have_count(0)
    expect(page.get_by_label("Reason")).to_have_value(reason)
    assert _overflow(page) <= 0

    # The colleague resolves it: no control is left to answer for a state that is gone, and
    # what was typed stays in view to copy.
    decisions.action_resolve(
        action, outcome="succeeded", reason="Closed by hand.", actor=operator_actor(colleague)
    )
    expect(page.locator("#action-state")).to_have_text("succeeded", timeout=6_000)
    expect(controls.locator("#settled-line")).to_contain_text("Nothing to decide")
    for name in ("Resolve as succeeded", "Resolve as failed", "Re-check now"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("^(Claim|Take over)"))).to_have_count(0)
    expect(page.locator("#claim-banner")).to_have_count(0)  # not "they are working on it"
    expect(notice).to_contain_text(reason)
    expect(notice).to_contain_text("not sent")
    assert _overflow(page) <= 0


def test_a_refused_resolve_is_said_next_to_the_control(
    live_db, downstream, new_page, console_server
):
    """A resolve sent from a page that has not heard yet (the live poll is off here): the
    refusal names who settled it, in the controls, and no control is left."""
    world = make_world(downstream)
    action = make_needs_human(world)
    page = new_page()
    page.route(re.compile(r".*[?&]live=1.*"), lambda route: route.abort())  # no live update
    sign_in(page, console_server, world.oncall, path=f"/actions/{action.pk}/")
    page.get_by_label("Reason").fill("Checked: closed.")
    decisions.action_resolve(
        action, outcome="failed", reason="It never landed.", actor=operator_actor(world.admin)
    )
    page.get_by_role("button", name="Resolve as succeeded").click()
    error = page.locator("#action-controls #controls-error")
    expect(error).to_contain_text("Not resolved: Only an unknown or needs_human action")
    expect(error).to_contain_text("This action is already failed")
    expect(error).to_contain_text("It never landed.")
    expect(page.locator("#action-controls")).to_contain_text("Checked: closed.")  # kept
    expect(page.get_by_role("button", name="Resolve as succeeded")).to_have_count(0)
    assert page.locator("#flash").count() == 0  # not at the top of the page, out of view
    assert wait_state(action.pk, "failed").resolution_reason == "It never landed."


@pytest.mark.parametrize("viewport", WIDTHS, ids=["1280", "390"])
def test_approvals_decided_elsewhere_leave_the_list_and_a_late_grant_is_refused_in_its_row(
    live_db, downstream, new_page, console_server, viewport
):
    world = make_world(downstream)
    run = start_run(world)
    first = make_awaiting(world, run=run, target=long_text("to-") + "@example.com")
    gone = make_awaiting(world, run=run, reason=long_text("because-"))
    late = make_awaiting(world, run=run, key=long_text("evt-"))
    page = sign_in(new_page(viewport=viewport), console_server, world.approver, path="/approvals/")
    assert _overflow(page) <= 0
    box = page.locator(f"#deny-{first.approval_request_id}")
    box.fill("Not to this customer")
    page.locator(f"#deny-{gone.approval_request_id}").fill("About to be granted by someone else")
    box.focus()

    newcomer = make_awaiting(world, run=run)
    decisions.approval_request_grant(
        gone.approval_request, ttl_seconds=600, actor=operator_actor(world.admin)
    )
    expect(page.locator(f"#request-{newcomer.approval_request_id}")).to_be_visible(timeout=8_000)
    expect(page.locator(f"#request-{gone.approval_request_id}")).to_have_count(0)  # left
    note = page.locator("#pending-region .gone-note")
    expect(note).to_contain_text("no longer pending")
    expect(note).to_contain_text("About to be granted by someone else")
    expect(box).to_have_value("Not to this customer")
    assert page.evaluate("document.activeElement.id") == f"deny-{first.approval_request_id}"

    # Granted elsewhere between two polls: the refusal is in that row, not at the page top.
    row = page.locator(f"#request-{late.approval_request_id}")
    page.route(re.compile(r".*/approvals/\?poll=1.*"), lambda route: route.abort())
    decisions.approval_request_grant(
        late.approval_request, ttl_seconds=600, actor=operator_actor(world.admin)
    )
    row.get_by_role("button", name="Grant").click()
    expect(row.get_by_role("alert")).to_contain_text("Not granted")
    expect(row.get_by_role("button", name="Grant")).to_have_count(0)
    assert _overflow(page) <= 0
