"""The console's Tokens page in headless Chromium: issue, rotate, revoke, as an admin would;
no serious accessibility violation."""

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect
from rest_framework.test import APIClient

from tests.builders import make_world
from tests.console.conftest import sign_in

pytestmark = pytest.mark.browser


def status_with(raw: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client.get("/api/v1/me").status_code


def test_admin_issues_rotates_and_revokes_a_token_in_the_browser(
    live_db,
    downstream,
    new_page,
    console_server,
):
    world = make_world(downstream)
    page = sign_in(new_page(), console_server, world.admin, path="/tokens/")
    page.get_by_label("For").select_option("principal:agent")
    page.get_by_label("Purpose").fill("browser-test")
    page.get_by_label("Expires").select_option("90")
    page.get_by_role("button", name="Issue token").click()
    shown = page.locator("#new-token-value")
    expect(shown).to_be_visible()
    raw = shown.input_value()
    assert raw.startswith("tko_") and status_with(raw) == 200

    row = page.locator("tr", has_text="browser-test")
    expect(row).to_have_count(1)
    row.get_by_role("button", name="Rotate").click()
    new_raw = page.locator("#new-token-value").input_value()
    assert new_raw != raw
    assert status_with(raw) == 401 and status_with(new_raw) == 200

    page.goto(console_server("/tokens/"))
    assert new_raw not in page.content()  # shown once
    row = page.locator("tr", has_text="browser-test")
    row.get_by_label("Reason").fill("test over")
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator(".flash")).to_contain_text("revoked")
    assert status_with(new_raw) == 401

    page.goto(console_server("/tokens/?state=all"))
    results = Axe().run(page)
    serious = [
        v["id"] for v in results.response["violations"] if v["impact"] in {"serious", "critical"}
    ]
    assert serious == []
    page.screenshot(path="var/tokens-page.png", full_page=True)
