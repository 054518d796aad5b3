"""Console fixtures: a live server on the test database, headless Chromium, and helpers that
put actions into a given state through the real engine (services, dispatch over HTTP to the
demo downstream, reconciliation) — never by writing a state column.

Why not pytest-django's `live_server`: it pulls in `transactional_db`, which flushes (TRUNCATE)
after each test, and the audit table refuses TRUNCATE by design. This server serves the same
committed test database that `live_db` tests write to; each test makes its own tenant.
"""

import os

import pytest
from django.db import connections
from django.test.testcases import LiveServerThread

from tests.builders import (  # noqa: F401 -- the shared builder, as the console tests name it
    PASSWORD,
    SETUP,
    Persona,
    add_operator,
    agent_of,
    declared_tool,
    make_awaiting,
    make_blocked,
    make_failed_run_with_tools,
    make_failed_run_without_tools,
    make_needs_human,
    make_resent,
    make_settled_by_lookup,
    make_unknown,
    operator_actor,
    propose,
    start_run,
    target_name,
    tool,
    user,
    wait_state,
)

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
