"""The four core tasks, timed in headless Chromium at 1280×800: clicks, typed fields and
seconds (machine time, no human reading time) for grant an approval, resolve an unknown,
force a replay with four eyes (two admins) and find a run's history.

Run explicitly (`pytest tests/console/core_tasks.py -s -p no:logging`); the name keeps it
out of `make test`. It prints a table. Each task starts where a person starts: the queue,
signed in, knowing only what a notification or a colleague would give them (the target,
the run's 8-character id). A step counts as a click (click, tick, choice) or a field
(typing into one box). The path through the console is the shortest one a person can see
on screen: `STEPS` says which version of the console it follows (`before`: main when the
issue was filed; `after`: this branch).
"""

import os
import re
import time

import pytest

from runs import runtime
from tests.builders import make_world
from tests.console.conftest import (
    agent_of,
    make_awaiting,
    make_unknown,
    propose,
    sign_in,
    start_run,
    tool,
    wait_state,
)

pytestmark = [pytest.mark.browser]
STEPS = os.environ.get("CORE_TASKS", "after")


class Counter:
    """A page wrapper that counts what a person does."""

    def __init__(self, page):
        self.page = page
        self.clicks = 0
        self.fields = 0

    def click(self, locator):
        locator.click()
        self.clicks += 1

    def fill(self, locator, text):
        locator.fill(text)
        self.fields += 1

    def enter(self, locator):
        locator.press("Enter")
        self.clicks += 1


def nav(page, name):
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name)


def timed(results, name, counter, body):
    start = time.monotonic()
    body(counter)
    results.append((name, counter.clicks, counter.fields, time.monotonic() - start))


def test_core_tasks(live_db, downstream, new_page, console_server):
    from core.services import tenant_settings_update
    from tests.console.conftest import SETUP, add_operator

    w = make_world(downstream)
    tool(w)
    awaiting = make_awaiting(w, target="maria.lopez@example.com")
    unknown = make_unknown(w, stay_unknown=False)
    unknown = wait_state(unknown.pk, {"unknown", "needs_human"})
    # A failed run that called a tool: replay is refused without force.
    run = start_run(w, config={"order": 1042})
    target = "TCK-9001"
    downstream.seed(target, {"status": "open"}, version=1)
    a = propose(w, run, tool(w), target, {"status": "closed"})
    from runs.engine import dispatch

    dispatch.action_dispatch(a.pk)
    wait_state(a.pk, {"succeeded", "failed", "unknown", "needs_human"})
    runtime.run_finish(
        run,
        status="error",
        error_message="model timed out",
        tools_called=["update_ticket"],
        actor=agent_of(w),
    )
    tenant_settings_update(w.tenant, actor=SETUP, four_eyes_force_replay=True)
    second_admin = add_operator(w, "admin2", "admin")
    short = str(run.pk)[:8]
    results = []

    def page_for(persona):
        page = new_page(viewport={"width": 1280, "height": 800})
        sign_in(page, console_server, persona)
        return Counter(page)

    # 1. Grant: the approver hears "maria.lopez is waiting for approval".
    def grant(c):
        p = c.page
        c.click(nav(p, re.compile("^Approvals")))
        row = p.locator(f"#request-{awaiting.approval_request_id}")
        c.click(row.get_by_role("button", name="Grant"))
        p.get_by_text(re.compile("^Granted")).wait_for()

    timed(results, "grant an approval", page_for(w.approver), grant)

    # 2. Resolve an unknown: on-call, from the queue, knowing nothing but the queue.
    def resolve(c):
        p = c.page
        c.click(p.locator(f"#open-{unknown.pk}"))
        p.wait_for_url(re.compile(f"/actions/{unknown.pk}/"))
        p.wait_for_load_state("networkidle")
        c.fill(p.get_by_label(re.compile("^Reason")), "Checked the ticket system by hand: closed.")
        c.click(p.get_by_role("button", name="Resolve as succeeded"))
        for _ in range(2):
            done = p.get_by_text(re.compile("^Resolved as"))
            stale = p.locator("#resolve-stale")
            done.or_(stale).first.wait_for()
            if done.count():
                return
            # Asked for a fresh read: re-check, then resolve again (the reason is kept).
            c.click(p.get_by_role("button", name="Re-check now"))
            p.wait_for_load_state("networkidle")
            if not p.get_by_label(re.compile("^Reason")).input_value():
                c.fill(p.get_by_label(re.compile("^Reason")), "Checked by hand: closed.")
            c.click(p.get_by_role("button", name="Resolve as succeeded"))
        p.get_by_text(re.compile("^Resolved as")).wait_for()

    timed(results, "resolve an unknown", page_for(w.oncall), resolve)

    # 3. Force replay with four eyes: the first admin asks, the second one confirms.
    def force_ask(c):
        p = c.page
        c.click(nav(p, "Runs"))
        c.click(p.get_by_role("link", name=re.compile(short)).first)
        c.fill(p.locator("#force-reason"), "Ticket updates are keyed; the ledger guards them.")
        c.fill(p.locator("#force-confirm"), short)
        c.click(p.get_by_role("button", name="Force replay"))
        p.get_by_text(re.compile("^Four eyes")).first.wait_for()

    def force_confirm(c):
        p = c.page
        if STEPS == "before":
            # No sign of the request anywhere but the replay history.
            c.click(nav(p, "Replays"))
            c.click(p.locator("#force-waiting-list").get_by_role("link").first)
            c.click(p.get_by_role("button", name="Confirm the force replay"))
        else:
            c.click(nav(p, re.compile("^Waiting for you")))
            c.click(p.get_by_role("link", name=re.compile("^Review")).first)
            c.click(p.get_by_role("button", name="Confirm the force replay"))
        p.get_by_text(re.compile("^Confirmed")).wait_for()

    ask = page_for(w.admin)
    confirm = page_for(second_admin)
    both = []
    timed(both, "ask", ask, force_ask)
    timed(both, "confirm", confirm, force_confirm)
    results.append(
        (
            "force replay, four eyes",
            sum(r[1] for r in both),
            sum(r[2] for r in both),
            sum(r[3] for r in both),
        )
    )

    # 4. Find a run's history: who did what to it and its actions, from its 8-character id.
    def history(c):
        p = c.page
        c.fill(p.locator("#site-search"), short)
        c.enter(p.locator("#site-search"))
        p.wait_for_url(re.compile(f"/runs/{run.pk}/"))
        if STEPS == "before":
            run_id = p.locator("#run-facts code.wrap").last.inner_text()
            c.click(nav(p, "Audit"))
            c.fill(p.get_by_label("Object id"), run_id)
            c.click(p.get_by_role("button", name=re.compile("^(Apply|Filter)")))
        else:
            c.click(p.get_by_role("link", name=re.compile("^Audit of this run")))
        p.locator("table tbody tr").first.wait_for()

    timed(results, "find a run's history", page_for(w.admin), history)

    print(f"\nCore tasks ({STEPS}), 1280×800, headless Chromium:")
    print(f"{'task':28} {'clicks':>6} {'fields':>6} {'seconds':>8}")
    for name, clicks, fields, seconds in results:
        print(f"{name:28} {clicks:6d} {fields:6d} {seconds:8.2f}")
