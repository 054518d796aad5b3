"""The real HTTP stack: gunicorn (as the README starts it) in front of the application, on
the test database. Chunked bodies, gunicorn's own error answers, the Host check, HTTPS=1,
the Content-Security-Policy, and the refusal to serve with a generated SECRET_KEY."""

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta

import httpx
import pytest

from tests.conftest import ROOT
from tests.takeover.conftest import WEB_SECRET, Server

http = httpx.Client(timeout=60)

SECRET = WEB_SECRET


@pytest.fixture(scope="module")
def server(web):
    """The session's web tier (tests/takeover/conftest.py), as the README starts it."""
    return web


@pytest.fixture(scope="module")
def https_server(django_db_setup):
    s = Server({"HTTPS": "1"}, workers=1, threads=4)
    yield s
    s.stop()


def chunks(payload: dict):
    data = json.dumps(payload).encode()
    yield data[:5]
    yield data[5:]


# --- chunked bodies --------------------------------------------------------------------------


def test_a_chunked_grant_is_read_not_taken_as_empty(world, server):
    world.tool("close_ticket", requires_approval=True)
    run = world.start_run()
    proposed = world.propose(
        run["id"],
        f"k-{uuid.uuid4().hex}",
        tool="close_ticket",
        target="t-9",
        desired_state={"status": "closed"},
    ).json()
    headers = {"Authorization": f"Bearer {world.approver.token}"}
    response = http.post(
        f"{server.url}/api/v1/approval-requests/{proposed['approval_request_id']}/grant",
        content=chunks({"ttl_seconds": 60}),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert response.request.headers["Transfer-Encoding"] == "chunked"
    assert response.status_code == 201, response.text
    approval = response.json()
    expires = datetime.fromisoformat(approval["expires_at"])
    assert abs(expires - (datetime.now(expires.tzinfo) + timedelta(seconds=60))) < timedelta(
        seconds=20
    )
    # A pre-granted approval (the granted one above may already be consumed by the worker
    # that dispatched its action), revoked with a chunked reason.
    approval = http.post(
        f"{server.url}/api/v1/approvals",
        json={"principal": "agent", "tool": "close_ticket", "target": "t-10", "desired_state": {}},
        headers=headers,
    ).json()
    revoked = http.post(
        f"{server.url}/api/v1/approvals/{approval['id']}/revoke",
        content=chunks({"reason": "the customer called back"}),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert revoked.status_code == 200, revoked.text
    from core.models import AuditEvent

    event = AuditEvent.objects.filter(object_id=approval["id"], verb__contains="revoke").get()
    assert event.reason == "the customer called back"


def test_a_chunked_body_over_the_limit_is_a_413(world, server, settings):
    headers = {"Authorization": f"Bearer {world.agent.token}", "Content-Type": "application/json"}
    big = {"trigger": "api", "config": {"x": "y" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE}}
    response = http.post(f"{server.url}/api/v1/runs", content=chunks(big), headers=headers)
    assert response.status_code == 413
    assert response.headers["Content-Type"].startswith("application/problem+json")


# --- errors are problem+json, even gunicorn's own ------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /api/v1/me?" + b"x" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414),
        (
            b"GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"x" * 9000 + b"\r\n\r\n",
            431,
        ),
        (b"NOT A REQUEST\r\n\r\n", 400),
        (b"GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n", 400),
    ],
)
def test_gunicorns_own_errors_are_problem_json(server, request_bytes, status):
    got, headers, body = server.raw(request_bytes)
    assert got == status
    assert headers["content-type"] == "application/problem+json"
    problem = json.loads(body)
    assert problem["status"] == status and problem["type"].startswith("/problems/")


@pytest.mark.parametrize("path", ["/api/v1/me", "/login/"])
def test_a_foreign_host_header_is_a_400_problem(server, path):
    response = http.get(f"{server.url}{path}", headers={"Host": "evil.example"})
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/problem+json"
    assert "Host" in response.json()["errors"]


def test_api_404_and_405_are_problem_json(server, world):
    auth = {"Authorization": f"Bearer {world.agent.token}"}
    for method, path, status in [
        ("GET", "/api/v1/nope", 404),
        ("DELETE", "/api/v1/runs", 405),
        ("GET", f"/api/v1/runs/{uuid.uuid4()}", 404),
    ]:
        response = http.request(method, f"{server.url}{path}", headers=auth)
        assert response.status_code == status
        assert response.headers["Content-Type"] == "application/problem+json"


# --- transport: HTTPS=1, CSP, the secret key ---------------------------------------------------


def test_pages_carry_a_strict_content_security_policy(server):
    response = http.get(f"{server.url}/login/")
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "default-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "Strict-Transport-Security" not in response.headers  # plain HTTP: no HSTS


def test_https_mode_redirects_plain_http_and_marks_cookies_secure(https_server):
    plain = http.get(f"{https_server.url}/login/", follow_redirects=False)
    assert plain.status_code == 301
    assert plain.headers["Location"].startswith("https://")
    proxied = http.get(f"{https_server.url}/login/", headers={"X-Forwarded-Proto": "https"})
    assert proxied.status_code == 200
    hsts = proxied.headers["Strict-Transport-Security"]
    assert "max-age=31536000" in hsts and "includeSubDomains" in hsts
    cookie = proxied.headers["Set-Cookie"]
    assert "csrftoken=" in cookie and "Secure" in cookie
    assert "Content-Security-Policy" in proxied.headers


def run_manage(args, env):
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "HTTPS", "DEBUG"}}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "takeover.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_https_and_a_secret_key():
    done = run_manage(["check", "--deploy"], {"DEBUG": "0", "SECRET_KEY": SECRET, "HTTPS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr


def test_check_deploy_refuses_a_generated_secret_key():
    done = run_manage(["check", "--deploy"], {"DEBUG": "0", "HTTPS": "1"})
    assert done.returncode != 0
    assert "takeover.E002" in done.stdout + done.stderr


def test_the_web_application_refuses_to_start_with_a_generated_key():
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    done = subprocess.run(
        [sys.executable, "-c", "import takeover.wsgi"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "takeover.settings", "DEBUG": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "SECRET_KEY is not set" in done.stderr
