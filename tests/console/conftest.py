"""Console fixtures: a live server on the test database, headless Chromium, and helpers that
put actions into a given state through the real engine (services, dispatch over HTTP to the
demo downstream, reconciliation) — never by writing a state column.

Why not pytest-django's `live_server`: it pulls in `transactional_db`, which flushes (TRUNCATE)
after each test, and the audit table refuses TRUNCATE by design. This server serves the same
committed test database that `live_db` tests write to; each test makes its own tenant.
"""

import os
import time
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.test.testcases import LiveServerThread

from core.audit import Actor
from core.services import operator_create
from runs import dispatch, services
from runs.models import Action
from tests.conftest import SETUP, Persona

PASSWORD = "correct horse"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


# --- a live server ---------------------------------------------------------------------------


class ConsoleServer:
    def __init__(self, thread):
        self.thread = thread
        self.url = f"http://{thread.host}:{thread.port}"

    def __call__(self, path: str) -> str:
        return self.url + path


@pytest.fixture(scope="session")
def console_server(django_db_setup):
    # WhiteNoise (with finders) serves /static/ inside the app, so no static handler here.
    thread = LiveServerThread("127.0.0.1", static_handler=lambda app: app)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait(10)
    if thread.error:
        raise thread.error
    yield ConsoleServer(thread)
    thread.terminate()


# --- the browser ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests make
    # for set-up would otherwise be refused as "async unsafe". They are plain sync calls.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield browser
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def new_page(browser, console_server):
    """Open a fresh browser context (its own cookies), 1280×800 unless `viewport` says
    otherwise; closed after the test."""
    contexts = []

    def make(**options):
        options.setdefault("viewport", {"width": 1280, "height": 800})
        context = browser.new_context(**options)
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()
    # While Playwright runs, this thread's ORM calls get database connections of their own
    # (Django keeps connections in context-local storage, and Playwright's greenlets change
    # the context); close them here, or they outlive the run and block dropping the test DB.
    connections.close_all()


def sign_in(page, server, persona, path="/"):
    page.goto(server(f"/login/?next={path}"))
    page.get_by_label("Username").fill(persona.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(server(path) + "*")
    return page


# --- people and data ----------------------------------------------------------------------------


def add_operator(world, name: str, role: str, tenant=None) -> Persona:
    username = f"{name}-{uuid.uuid4().hex[:6]}"
    _, token = operator_create(
        tenant=tenant or world.tenant, username=username, role=role, password=PASSWORD, actor=SETUP
    )
    return Persona(username, token)


def agent_of(world) -> Actor:
    return Actor("principal", world.principal.name)


def user(persona):
    return get_user_model().objects.get(username=persona.username)


def operator_actor(persona) -> Actor:
    return Actor("operator", persona.username)


def start_run(world, **options):
    return services.run_start(
        principal=world.principal,
        trigger="api",
        config=options.pop("config", {"n": 1}),
        actor=agent_of(world),
        **options,
    )


def tool(world, name="update_ticket", prefix="tickets", **options):
    from core.models import Tool

    existing = Tool.objects.filter(tenant=world.tenant, name=name).first()
    return existing or world.tool(name, prefix=prefix, **options)


def propose(world, run, tool_, target, desired, expected_version=None, key=None, reason=""):
    action, created, _ = services.action_propose(
        run=run,
        tool=tool_,
        target=target,
        desired_state=desired,
        expected_version=expected_version,
        idempotency_key=key or f"k-{uuid.uuid4().hex}",
        reason=reason,
        actor=agent_of(world),
    )
    assert created
    return action


def wait_state(action_id, states, timeout=20.0) -> Action:
    states = {states} if isinstance(states, str) else set(states)
    deadline = time.monotonic() + timeout
    while True:
        action = Action.objects.get(pk=action_id)
        if action.state in states or time.monotonic() > deadline:
            assert action.state in states, f"action is {action.state}, wanted {states}"
            return action
        time.sleep(0.1)


def target_name(prefix="T") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def make_unknown(world, *, stay_unknown=True, run=None, target=None):
    """An action whose dispatch got a 503: sent, outcome unknown. With `stay_unknown`, reads
    of its target keep failing, so reconciliation (ours or a worker's) leaves it unknown."""
    ds = world.downstream
    target = target or target_name()
    t = tool(world)
    if stay_unknown:
        ds.fault("error_on_read", prefix="tickets", target=target, times=1000)
    ds.fault("error_before_commit", prefix="tickets", target=target)
    run = run or start_run(world)
    action = propose(world, run, t, target, {"status": "closed"}, None)
    dispatch.action_dispatch(action.pk)  # None if a running worker claimed it first
    return wait_state(action.pk, {"unknown", "needs_human"} if not stay_unknown else "unknown")


def make_needs_human(world, *, run=None, target=None):
    """An action whose outcome was lost and whose target, read back, differs in `status`."""
    ds = world.downstream
    target = target or target_name()
    ds.seed(target, {"status": "open", "priority": "high"}, version=3)
    t = tool(world)
    ds.fault("error_before_commit", prefix="tickets", target=target)
    run = run or start_run(world)
    action = propose(world, run, t, target, {"status": "closed", "priority": "high"}, 3)
    dispatch.action_dispatch(action.pk)
    action = wait_state(action.pk, {"unknown", "needs_human"})
    if action.state == "unknown":
        # Not `manual`: this takes the reconcile lease, so a running worker's reconcile of
        # the same action does not read too (the tests count reads).
        dispatch.action_reconcile(action.pk)
    return wait_state(action.pk, "needs_human")


def make_awaiting(world, *, run=None, target=None, reason=""):
    """An e-mail that needs an approver: awaiting_approval with a pending request."""
    t = tool(world, "send_email", prefix="email", requires_approval=True)
    run = run or start_run(world)
    target = target or f"{uuid.uuid4().hex[:6]}@example.com"
    return propose(
        world,
        run,
        t,
        target,
        {"subject": "Refund", "body": "Your refund is on its way."},
        reason=reason,
    )


def make_failed_run_with_tools(world):
    """A run that called a tool and then failed: replay is refused without force."""
    run = start_run(world, config={"order": 1042})
    t = tool(world)
    target = target_name()
    action = propose(world, run, t, target, {"status": "closed"}, None)
    dispatch.action_dispatch(action.pk)
    wait_state(action.pk, {"succeeded", "failed", "unknown", "needs_human"})
    return services.run_finish(
        run,
        status="error",
        error_message="model timed out",
        tools_called=["update_ticket"],
        actor=agent_of(world),
    )


def make_failed_run_without_tools(world):
    run = start_run(world, config={"order": 7})
    return services.run_finish(
        run, status="error", error_message="bad input", tools_called=[], actor=agent_of(world)
    )


def declared_tool(world, name="notify_customer", prefix="email", **declarations):
    """A tool with declarations (issue 13); the demo outbox is idempotent with lookup."""
    declarations.setdefault("effect", "idempotent")
    declarations.setdefault("lookup", True)
    return tool(world, name, prefix=prefix, **declarations)


def _reconcile_until(action_id, states, timeout=20.0) -> Action:
    """Reconcile in this process (or let a running worker do it) until `states`."""
    deadline = time.monotonic() + timeout
    while Action.objects.get(pk=action_id).state not in states:
        if time.monotonic() > deadline:
            break
        dispatch.action_reconcile(action_id)  # no-op unless due and unclaimed
        time.sleep(0.2)
    return wait_state(action_id, states, timeout=1)


def make_settled_by_lookup(world, *, run=None, target=None):
    """An e-mail whose answer was lost; the outbox's lookup says it applied the key."""
    target = target or f"{uuid.uuid4().hex[:6]}@example.com"
    t = declared_tool(world)
    world.downstream.fault("drop_after_commit", prefix="email", target=target)
    run = run or start_run(world)
    action = propose(world, run, t, target, {"subject": "Your refund", "body": "On its way."})
    dispatch.action_dispatch(action.pk)
    return _reconcile_until(action.pk, {"succeeded"})


def make_resent(world, *, run=None, target=None):
    """An e-mail the outbox never received (503): its lookup says so, and it is sent again
    with the same key, attempt 2."""
    target = target or f"{uuid.uuid4().hex[:6]}@example.com"
    t = declared_tool(world)
    world.downstream.fault("error_before_commit", prefix="email", target=target)
    run = run or start_run(world)
    action = propose(world, run, t, target, {"subject": "Renewal", "body": "Hello again."})
    dispatch.action_dispatch(action.pk)
    return _reconcile_until(action.pk, {"succeeded"})
