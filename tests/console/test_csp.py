"""The console and the API docs work under the strict Content-Security-Policy: Chromium
reports no violation, and the pages still do their job."""

import pytest

from tests.conftest import make_world
from tests.console.conftest import make_needs_human, sign_in

pytestmark = pytest.mark.browser


def test_no_page_violates_the_content_security_policy(
    live_db, downstream, new_page, console_server
):
    world = make_world(downstream)
    action = make_needs_human(world)
    page = new_page()
    violations = []
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    sign_in(page, console_server, world.admin)
    pages = ["/", f"/actions/{action.pk}/", "/actions/", "/runs/", "/audit/", "/replays/"]
    pages += ["/approvals/", "/conflicts/", "/tokens/", "/preferences/"]
    pages += [f"/search/?q={action.idempotency_key}"]
    for path in pages:
        response = page.goto(console_server(path))
        assert "script-src 'self'" in response.headers["content-security-policy"]
    page.goto(console_server("/"))
    page.wait_for_timeout(300)  # let htmx start polling
    page.goto(console_server("/api/v1/docs/"))
    page.wait_for_selector(".swagger-ui .info", timeout=15_000)
    assert violations == []
