"""Single sign-on in a real browser against a real OpenID Connect provider (tests/idp: a
django-oauth-toolkit provider in its own process, on its own database): roles from the
provider's groups, a clear refusal for someone with none, the subject in the audit log,
passwords off except for the break-glass admin; axe on the new pages."""

import io
import subprocess
import sys
import uuid

import psycopg
import pytest
from axe_playwright_python.sync_playwright import Axe
from django.core.management import call_command
from django.db import connections
from django.test import Client

from bench.management.commands.bench_queue import database_url as url_for
from console.models import BreakGlass, SsoIdentity
from core.models import AuditEvent, Membership
from tests.conftest import ROOT
from tests.console.conftest import PASSWORD
from tests.idp.serve import CLIENT_ID, CLIENT_SECRET, USER_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROVIDER = "Acme SSO"
SCREENSHOTS = ROOT / "var" / "screenshots"


@pytest.fixture(scope="module")
def idp(django_db_setup, django_db_blocker, console_server):
    """The provider, on a database of its own on the test server; its URL."""
    owner = connections["owner"].settings_dict
    name = f"test_idp_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url_for(owner, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.idp.serve"),
            *("--redirect-uri", console_server("/sso/callback/")),
        ],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "IDP_DATABASE_URL": url_for(owner, name),
            "DJANGO_SETTINGS_MODULE": "tests.idp.settings",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"the identity provider did not start: {line}{process.stdout.read()}")
    yield line.strip().rsplit(" ", 1)[-1]
    process.terminate()
    process.wait(15)
    with psycopg.connect(url_for(owner, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sso(settings, idp, world):
    """Single sign-on on, as the environment would set it: group takeover-oncall is on call
    in this test's tenant."""
    issuer = f"{idp}/o"
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_OP_ISSUER = issuer
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{issuer}/authorize/"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{issuer}/token/"
    settings.OIDC_OP_USER_ENDPOINT = f"{issuer}/userinfo/"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{issuer}/.well-known/jwks.json"
    settings.OIDC_GROUP_ROLES = f"takeover-oncall={world.tenant.slug}:oncall"
    settings.SSO_PROVIDER_NAME = PROVIDER
    settings.SSO_ENABLED = True
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, "console.sso.SsoBackend"]
    return issuer


def sign_in_at_the_provider(page, console_server, username):
    page.goto(console_server("/login/"))
    page.get_by_role("link", name=f"Sign in with {PROVIDER}").click()
    page.get_by_label("Acme user name").fill(username)
    page.get_by_label("Acme password").fill(USER_PASSWORD)
    page.get_by_role("button", name="Continue").click()


def axe_violations(page) -> list:
    return [
        (v["id"], [n["target"] for n in v["nodes"]][:3])
        for v in Axe().run(page).response["violations"]
    ]


def test_someone_in_the_oncall_group_lands_in_the_queue_on_call(
    sso, world, new_page, console_server
):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = new_page()
    page.goto(console_server("/login/"))
    assert axe_violations(page) == []
    page.screenshot(path=str(SCREENSHOTS / "sso-login.png"))
    sign_in_at_the_provider(page, console_server, "olivia")

    page.wait_for_url(console_server("/"))
    assert page.locator("#signed-in-user").inner_text() == "olivia"
    assert "(oncall)" in page.locator(".who .roles").inner_text()
    assert page.get_by_role("heading", level=1).first.inner_text()  # the queue renders
    page.screenshot(path=str(SCREENSHOTS / "sso-queue.png"))

    identity = SsoIdentity.objects.select_related("user").get(user__username="olivia")
    assert identity.issuer == sso and identity.subject  # the provider's `sub`
    membership = Membership.objects.get(user=identity.user, tenant=world.tenant)
    assert membership.role == "oncall"
    # The audit log names the provider's subject, and who granted the role.
    signed_in = AuditEvent.objects.filter(tenant=world.tenant, verb="operator.sso_sign_in").latest(
        "at"
    )
    assert signed_in.actor_name == "olivia"
    assert signed_in.after["subject"] == identity.subject
    assert signed_in.after["issuer"] == sso
    assert signed_in.after["groups"] == ["takeover-oncall"]
    granted = AuditEvent.objects.get(
        tenant=world.tenant, verb="operator.grant_role", actor_kind="system", actor_name="sso"
    )
    assert granted.after["subject"] == identity.subject


def test_someone_with_no_mapped_group_is_refused_with_a_clear_page(
    sso, world, new_page, console_server
):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = new_page()
    sign_in_at_the_provider(page, console_server, "nora")

    page.wait_for_url(console_server("/sso/callback/") + "*")
    assert page.get_by_role("heading", level=1).inner_text() == "You have no role in Takeover"
    alert = page.get_by_role("alert").inner_text()
    assert "signed you in as nora" in alert and "not signed in" in alert
    assert "marketing" in page.locator("main").inner_text()
    assert axe_violations(page) == []
    page.screenshot(path=str(SCREENSHOTS / "sso-refused.png"))
    # Not signed in: the console sends her to the sign-in page.
    page.goto(console_server("/"))
    assert page.url.startswith(console_server("/login/"))
    assert not SsoIdentity.objects.filter(user__username="nora").exists()


def test_passwords_are_off_with_sso_except_for_the_break_glass_admin(sso, world):
    client = Client()
    refused = client.post("/login/", {"username": world.oncall.username, "password": PASSWORD})
    assert refused.status_code == 200  # the sign-in page again, with the error
    assert "_auth_user_id" not in client.session

    out = io.StringIO()
    name = f"glass-{uuid.uuid4().hex[:6]}"
    call_command("break_glass", "--tenant", world.tenant.slug, name, stdout=out)
    password = out.getvalue().strip()
    assert BreakGlass.objects.filter(user__username=name).exists()
    allowed = client.post("/login/", {"username": name, "password": password})
    assert allowed.status_code == 302, allowed.content
    assert AuditEvent.objects.filter(tenant=world.tenant, verb="operator.break_glass").exists()

    call_command("break_glass", "--tenant", world.tenant.slug, "--end", name, stdout=io.StringIO())
    again = Client().post("/login/", {"username": name, "password": password})
    assert again.status_code == 200
