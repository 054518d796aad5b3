"""A replay that says what it will do, and four eyes that reach the second admin, in headless
Chromium at 1280 and 390 px with 200-character keys, targets and reasons.

- The dry run, before a single, a forced and a bulk replay: per key, what the ledger hands
  back (a recorded success, a recorded failure) and what would be sent again.
- A replay whose every key only hands back a recorded failure says so and is not offered.
- Four eyes: the second admin sees a count in the navigation and an inbox, gets a
  notification of its own kind, confirms on a page with the requester, the reason and the
  dry run; the history names both admins.
"""

import re
import uuid

import pytest
from playwright.sync_api import expect

from core.services import tenant_settings_update
from notifications.models import NotificationEvent
from runs import dryrun, runtime
from runs.engine import dispatch
from runs.models import ForceReplayRequest, Run
from tests.builders import SETUP, long_text, make_world
from tests.console.conftest import (
    add_operator,
    agent_of,
    operator_actor,
    propose,
    sign_in,
    start_run,
    tool,
    wait_state,
)

pytestmark = pytest.mark.browser
WIDTHS = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]


def _overflow(page):
    """How far the page scrolls sideways, and what sticks out (for the failure message)."""
    extra = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    if extra <= 0:
        return 0
    return extra, page.evaluate(
        """() => [...document.querySelectorAll('body *')]
            .filter(e => !e.closest('.mainnav'))
            .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
            .slice(0, 6).map(e => e.tagName + '.' + e.className + '#' + e.id)"""
    )


def failed_run(world, *, rejected=False):
    """A run that called update_ticket under a 200-character key and then failed. With
    `rejected`, the tool refused the call (409: the ticket moved on), so the ledger holds a
    recorded failure; otherwise the call succeeded and the ledger holds a success."""
    run = start_run(world, config={"order": long_text("order-")})
    target = long_text("T-")[:-8] + uuid.uuid4().hex[:8]
    world.downstream.seed(target, {"status": "open"}, version=5)
    key = long_text("evt-")[:-8] + uuid.uuid4().hex[:8]
    action = propose(
        world, run, tool(world), target, {"status": "closed"}, 4 if rejected else 5, key=key
    )
    dispatch.action_dispatch(action.pk)
    wait_state(action.pk, "failed" if rejected else "succeeded")
    runtime.run_finish(
        run,
        status="error",
        error_message=long_text("model-timeout-"),
        tools_called=["update_ticket"],
        actor=agent_of(world),
    )
    return run, action


def test_the_dry_run_reads_the_ledger_key_by_key(live_db, downstream):
    world = make_world(downstream)
    ok_run, ok = failed_run(world)
    bad_run, _ = failed_run(world, rejected=True)
    good = dryrun.dry_run_for(ok_run)
    assert [(k.key, k.outcome) for k in good.keys] == [(ok.idempotency_key, "success")]
    assert not good.only_failures and good.at_risk == []
    futile = dryrun.dry_run_for(bad_run)
    assert [k.outcome for k in futile.keys] == ["failure"]
    assert futile.only_failures and "cannot fix this run" in futile.summary
    assert "409" in futile.keys[0].words


@pytest.mark.parametrize("viewport", WIDTHS, ids=["1280", "390"])
def test_a_replay_that_can_only_fail_again_is_not_offered(
    live_db, downstream, new_page, console_server, viewport
):
    world = make_world(downstream)
    run, action = failed_run(world, rejected=True)
    page = sign_in(
        new_page(viewport=viewport), console_server, world.admin, path=f"/runs/{run.pk}/"
    )
    panel = page.locator("#replay-panel")
    expect(panel.locator(".dry-summary")).to_contain_text("hands back its recorded failure")
    expect(panel.locator(f'li[data-key="{action.idempotency_key}"]')).to_contain_text(
        "recorded failure"
    )
    expect(page.locator("#replay-futile")).to_contain_text("cannot fix this run")
    expect(
        page.get_by_role("button", name=re.compile("^(Replay this run|Force replay)"))
    ).to_have_count(0)
    assert not _overflow(page), _overflow(page)


@pytest.mark.parametrize("viewport", WIDTHS, ids=["1280", "390"])
def test_four_eyes_reach_the_second_admin_with_the_dry_run_and_history_names_both(
    live_db, downstream, new_page, console_server, viewport
):
    world = make_world(downstream)
    tenant_settings_update(world.tenant, actor=SETUP, four_eyes_force_replay=True)
    second = add_operator(world, "admin2", "admin")
    from notifications.services import channel_create

    channel_create(
        tenant=world.tenant,
        name="admins by e-mail",
        kind="email",
        events=["replay.force_requested"],
        actor=operator_actor(world.admin),
    )
    run, action = failed_run(world)
    reason = "Keys guard every ticket update: " + long_text("ledger-", 160)
    first = sign_in(
        new_page(viewport=viewport), console_server, world.admin, path=f"/runs/{run.pk}/"
    )
    # The dry run, before the force: the key hands back its recorded success.
    expect(first.locator(f'li[data-key="{action.idempotency_key}"]')).to_contain_text(
        "recorded success"
    )
    first.get_by_label(re.compile("^Reason")).fill(reason)
    first.get_by_label(re.compile("Type the run id")).fill(str(run.pk)[:8])
    first.get_by_role("button", name="Force replay").click()
    expect(first.get_by_role("status").first).to_contain_text("Waiting for you")
    expect(first.locator("#nav-count-force")).to_have_text("")  # not for the one who asked
    assert not Run.objects.filter(replay_of=run).exists()
    request = ForceReplayRequest.objects.get(run=run)
    event = NotificationEvent.objects.get(kind="replay.force_requested", subject_id=request.pk)
    assert (event.subject_type, event.subject_id) == ("force_request", request.pk)

    other = sign_in(new_page(viewport=viewport), console_server, second)
    expect(other.locator("#nav-count-force")).to_contain_text("1")
    other.get_by_role("navigation", name="Main").get_by_role(
        "link", name=re.compile("^Waiting for you")
    ).click()
    item = other.locator(f'[data-force-request="{request.pk}"]')
    expect(item).to_contain_text(f"operator:{world.admin.username}")
    expect(item).to_contain_text(re.compile(r"\d+ s ago"))  # seconds, not "1 min"
    assert not _overflow(other), _overflow(other)
    item.get_by_role("link", name=re.compile("^Review")).click()
    box = other.locator("#force-request")
    expect(box).to_contain_text(f"operator:{world.admin.username}")
    expect(box).to_contain_text(reason)
    expect(box.locator(f'li[data-key="{action.idempotency_key}"]')).to_contain_text(
        "recorded success"
    )
    assert not _overflow(other), _overflow(other)
    other.get_by_role("button", name="Confirm the force replay").click()
    expect(other.get_by_role("status").first).to_contain_text("Confirmed. Forced replay created")
    expect(other.get_by_role("status").first).to_contain_text("hands back a recorded success")
    replay = Run.objects.get(replay_of=run)
    other.goto(console_server(f"/runs/{replay.pk}/"))
    lineage = other.locator("#lineage")
    expect(lineage).to_contain_text(f"forced by operator:{world.admin.username}")
    expect(lineage).to_contain_text(f"confirmed by operator:{second.username}")
    other.goto(console_server("/replays/"))
    expect(other.locator("[data-replay]").first).to_contain_text(
        f"confirmed by operator:{second.username}"
    )
    assert not _overflow(other), _overflow(other)
