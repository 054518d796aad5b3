"""Phones and findability, in headless Chromium: every page state fits 390 px (and 1280 px)
with 200-character keys, targets and reasons, with no axe violation; the decision comes
before the timeline; search is in reach; the queue's first row is in the first screen; runs
and actions link to their audit."""

import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from runs import decisions
from tests.builders import long_text, make_world
from tests.console.conftest import (
    make_awaiting,
    make_blocked,
    make_failed_run_with_tools,
    make_needs_human,
    make_unknown,
    operator_actor,
    sign_in,
    start_run,
)

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


def _overflow(page) -> int:
    return page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390", "1280"])
def test_no_page_scrolls_sideways_and_axe_finds_nothing_with_200_character_data(
    live_db, downstream, new_page, console_server, viewport
):
    world = make_world(downstream)
    run = start_run(world)
    needs = make_needs_human(
        world, run=run, target=long_text("T-"), key=long_text("evt-"), reason=long_text("why-")
    )
    awaiting = make_awaiting(
        world,
        run=run,
        target=long_text("to-") + "@example.com",
        key=long_text("mail-"),
        reason=long_text("because-"),
    )
    blocked = make_blocked(world, run=run)
    oncall = operator_actor(world.oncall)
    decisions.action_acknowledge(blocked, note=long_text("note-"), actor=oncall)
    make_unknown(world, run=run)
    decisions.action_resolve(
        make_needs_human(world, run=run, key=long_text("k2-")),
        outcome="failed",
        reason="Checked by hand: " + long_text("idem-key-", 180),
        actor=operator_actor(world.oncall),
    )
    failed = make_failed_run_with_tools(world)
    page = sign_in(new_page(viewport=viewport), console_server, world.admin)
    pages = {
        "queue": "/",
        "action": f"/actions/{needs.pk}/",
        "action awaiting approval": f"/actions/{awaiting.pk}/",
        "approvals": "/approvals/",
        "runs": "/runs/",
        "run": f"/runs/{failed.pk}/",
        "audit": "/audit/",
        "replays": "/replays/",
        "waiting for you": "/force-replays/",
        "settings": "/settings/",
        "audit of a run": f"/audit/?run={run.pk}",
        "all actions": "/actions/",
        "search results": f"/search/?q={needs.target}&list=1",
        "404": "/no/such/page/",
        "404 of an object": "/actions/00000000-0000-0000-0000-000000000000/",
    }
    axe = Axe()
    too_wide, violations = {}, {}
    for name, path in pages.items():
        page.goto(console_server(path))
        if (extra := _overflow(page)) > 0:
            too_wide[name] = extra
        found = axe.run(page).response["violations"]
        if found:
            violations[name] = [(v["id"], [n["target"] for n in v["nodes"]][:3]) for v in found]
    assert not too_wide, too_wide
    assert not violations, violations


def test_phone_puts_the_decision_before_the_timeline_and_keeps_the_header_small(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    action = make_needs_human(world)
    awaiting = make_awaiting(world)
    page = sign_in(new_page(viewport=PHONE), console_server, world.admin)
    header = page.locator("header.topbar").bounding_box()
    assert header["height"] <= 140, header  # brand and account, the sections, search
    search = page.get_by_role("searchbox", name="Search")
    expect(search).to_be_visible()  # search is in reach on a phone

    row = page.locator(f"#row-{action.pk}")
    first = page.locator("#queue-rows tr").first.bounding_box()
    assert first["y"] + first["height"] <= PHONE["height"], first  # in the first screen
    link = row.get_by_role("link", name=action.target)
    box = link.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    link.click()

    def top(selector):
        return page.locator(selector).bounding_box()["y"]

    assert top("#diff") < top("#resolve-form") < top("#timeline-panel")
    assert top("#resolve-form") < 844 * 1.5, "the decision is within reach, not 1,900 px down"
    page.get_by_label("Reason").fill("Confirmed closed by phone.")
    page.get_by_role("button", name="Resolve as succeeded").click()
    expect(page.locator("#action-state")).to_have_text("succeeded")

    page.goto(console_server("/approvals/"))
    row = page.locator(f"#request-{awaiting.approval_request_id}")
    grant = row.get_by_role("button", name="Grant")
    deny = row.get_by_role("button", name="Deny")
    for button in (grant, deny):
        b = button.bounding_box()
        assert b["x"] >= 0 and b["x"] + b["width"] <= PHONE["width"], b
    grant.click()
    expect(page.get_by_role("status").first).to_contain_text("queued for dispatch")

    # Search from the phone's header, by the action's target; its page links to its audit.
    page.get_by_role("searchbox", name="Search").fill(action.target)
    page.get_by_role("searchbox", name="Search").press("Enter")
    expect(page).to_have_url(re.compile(f"/actions/{action.pk}/"))
    page.get_by_role("link", name="Audit of this action").click()
    expect(page.locator(f'tr[data-object="{action.pk}"]').first).to_be_visible()
    page.goto(console_server(f"/runs/{action.run_id}/"))
    page.get_by_role("link", name="Audit of this run").click()
    expect(page.locator("#audit-of-run")).to_contain_text("its events and those of its actions")
    verbs = page.locator("tbody tr[data-verb]")
    expect(verbs.first).to_be_visible()
    assert page.locator('tr[data-verb="action.succeeded"]').count() >= 1
