"""Every console page, at 1280 px and at 390 px: axe finds no violation, Chromium reports no
Content-Security-Policy violation, and at 390 px nothing scrolls sideways. Including the
pages reached by a POST (a bulk preview and its result, a new signing secret), the sign-in
page, the 404 and the 500."""

import contextlib
import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from core.errors import IdempotencyConflict
from notifications.kinds import KINDS
from notifications.services import channel_create
from runs.propose import action_propose
from runs.replay import run_replay
from tests.builders import make_world
from tests.console.conftest import (
    agent_of,
    make_awaiting,
    make_failed_run_with_tools,
    make_needs_human,
    make_unknown,
    operator_actor,
    propose,
    sign_in,
    start_run,
    tool,
)
from tests.receiver import start_receiver

pytestmark = pytest.mark.browser

WIDTHS = [(1280, 800), (390, 844)]


def _overflow(page) -> int:
    return page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )


def scene(downstream):
    world = make_world(downstream)
    run = start_run(world)
    needs = make_needs_human(world, run=run)
    make_needs_human(world, run=run)
    make_unknown(world, run=run)
    awaiting = make_awaiting(
        world, run=run, target="a.very.long.address.for.a.phone@example.com", reason="Asked twice."
    )
    failed = make_failed_run_with_tools(world)
    replay = run_replay(
        failed, force=True, reason="keys guard it", actor=operator_actor(world.admin)
    )
    held = propose(world, start_run(world), tool(world), "T-1", {"status": "closed"}, key="e:1")
    with contextlib.suppress(IdempotencyConflict):  # a conflict, for the conflicts page
        action_propose(
            run=start_run(world),
            tool=tool(world),
            target="T-2",
            desired_state={"status": "closed"},
            expected_version=None,
            idempotency_key=held.idempotency_key,
            actor=agent_of(world),
        )
    receiver, server = start_receiver()
    channel_create(
        tenant=world.tenant,
        name="on-call pager",
        kind="webhook",
        url=receiver.url,
        events=list(KINDS),
        actor=operator_actor(world.admin),
    )
    channel_create(
        tenant=world.tenant,
        name="approver mail",
        kind="email",
        events=["approval.requested"],
        actor=operator_actor(world.admin),
    )
    make_awaiting(world, run=run)  # one delivery at least, in the log
    # Four eyes: a force replay waiting for a second admin (its inbox and confirm page).
    from core.services import tenant_settings_update
    from runs.replay import run_force_replay

    tenant_settings_update(
        world.tenant, actor=operator_actor(world.admin), four_eyes_force_replay=True
    )
    _, waiting = run_force_replay(
        make_failed_run_with_tools(world), reason="keys guard it", actor=operator_actor(world.admin)
    )
    pages = {
        "queue": "/",
        "action": f"/actions/{needs.pk}/",
        "action awaiting approval": f"/actions/{awaiting.pk}/",
        "approvals": "/approvals/",
        "approval state": f"/approvals/{awaiting.approval_request_id}/state/",
        "runs": "/runs/",
        "run": f"/runs/{failed.pk}/",
        "run (a pending replay)": f"/runs/{replay.pk}/",
        "replays": "/replays/",
        "waiting for you": "/force-replays/",
        "force replay to confirm": f"/force-replays/{waiting.pk}/",
        "settings": "/settings/",
        "audit": "/audit/",
        "audit of a run": f"/audit/?run={run.pk}",
        "all actions": "/actions/",
        "conflicts": "/conflicts/",
        "search": "/search/",
        "search results": f"/search/?q={needs.target}&list=1",
        "tokens": "/tokens/",
        "tools": "/tools/",
        "notifications": "/notifications/",
        "delivery log": "/notifications/deliveries/",
        "preferences": "/preferences/",
        "404": "/no/such/page/",
        "404 of an object": "/actions/00000000-0000-0000-0000-000000000000/",
    }
    return world, pages, server


def test_every_page_has_no_axe_violations_and_no_sideways_scroll_at_both_widths(
    live_db, downstream, new_page, console_server
):
    from django.test import RequestFactory

    from takeover.errors import server_error

    world, pages, server = scene(downstream)
    error_page = server_error(RequestFactory().get("/")).content
    axe = Axe()
    found, too_wide, csp = {}, {}, []

    def check(page, name, width):
        page.wait_for_load_state("networkidle")
        if violations := axe.run(page).response["violations"]:
            found[f"{name} @{width}"] = [
                (v["id"], [n["target"] for n in v["nodes"]][:3]) for v in violations
            ]
        if width < 700 and (extra := _overflow(page)) > 0:
            too_wide[f"{name} @{width}"] = extra

    try:
        for width, height in WIDTHS:
            page = new_page(viewport={"width": width, "height": height})
            page.on(
                "console",
                lambda m: csp.append(m.text) if "Content Security Policy" in m.text else None,
            )
            page.goto(console_server("/login/"))
            check(page, "sign-in", width)
            sign_in(page, console_server, world.admin)
            for name, path in pages.items():
                page.goto(console_server(path))
                check(page, name, width)

            # Reached by a POST: a bulk preview and its result ...
            page.goto(console_server("/"))
            for box in page.locator('input[form="bulk-form"]').all()[:3]:
                box.check()
            page.get_by_label("With the selected").select_option("recheck")
            page.get_by_role("button", name="Preview").click()
            expect(page.get_by_role("heading", name=re.compile("^Preview"))).to_be_visible()
            check(page, "bulk preview", width)
            page.get_by_role("button", name=re.compile("^Confirm")).click()
            expect(page.get_by_role("heading", name=re.compile("^Done"))).to_be_visible()
            check(page, "bulk result", width)
            # ... a bulk resolve whose items contradict their fresh reads ...
            page.goto(console_server("/"))
            for box in page.locator('input[form="bulk-form"]').all():
                box.uncheck()
            for box in page.locator('tr[data-state="needs_human"] input[form="bulk-form"]').all():
                box.check()
            page.get_by_label("With the selected").select_option("resolve:succeeded")
            page.get_by_label(re.compile("^Reason")).fill("Closed by hand.")
            page.get_by_role("button", name="Preview").click()
            expect(page.locator("tr[data-flagged]").first).to_be_visible()
            check(page, "bulk preview with contradicting items", width)
            # ... a new signing secret ...
            page.goto(console_server("/notifications/"))
            form = page.locator("#add-channel")
            form.get_by_label("Name").fill(f"hook {width}")
            form.get_by_label(re.compile("^URL")).fill("http://127.0.0.1:9/hook")
            form.get_by_label("Force replay done").check()
            form.get_by_role("button", name="Add the channel").click()
            expect(page.locator("#new-secret-value")).to_be_visible()
            check(page, "notifications with a new secret", width)
            # ... and the 500 page, as the server renders it.
            page.route(
                console_server("/__500__"),
                lambda route: route.fulfill(
                    status=500, body=error_page, content_type="text/html; charset=utf-8"
                ),
            )
            page.goto(console_server("/__500__"))
            expect(page.get_by_role("heading", name="Something went wrong")).to_be_visible()
            check(page, "500", width)
    finally:
        server.shutdown()
    assert not found, found
    assert not too_wide, too_wide
    assert csp == []
