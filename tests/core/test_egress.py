"""The egress policy (docs/design.md, "The tool protocol"): tools cannot be aimed inward."""

import socket
import uuid

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured

from core import egress
from core.models import AuditEvent, Tool
from core.services import tool_update
from runs.models import Action
from tests.builders import SETUP

from ..conftest import problem, start_downstream


def register(world, base_url, name=None):
    return world.admin.client().post(
        "/api/v1/tools",
        {"name": name or f"t_{uuid.uuid4().hex[:8]}", "base_url": base_url},
        format="json",
    )


def counts(world):
    return (
        Tool.objects.filter(tenant=world.tenant).count(),
        AuditEvent.objects.filter(tenant=world.tenant).count(),
    )


@pytest.mark.parametrize(
    "base_url",
    [
        # The reported SSRF: "#" turns the appended /effects into a fragment.
        "http://127.0.0.1:8828/data.json#",
        "http://127.0.0.1:8828/data.json#x",
        "http://127.0.0.1:8828/data?",
        "http://127.0.0.1:8828/data?x=1",
        "http://user:secret@127.0.0.1:8828/",
        "http://user@127.0.0.1:8828/",
        "ftp://127.0.0.1/tickets",
        "file:///etc/passwd",
        "/tickets",
        "127.0.0.1:8100/tickets",
        "http://",
        "http://127.0.0.1:99999/",
        "http://127.0.0.1:8100/tick ets",
        "http://127.0.0.1:8100/\u0000",
        # Outside the allowlist (the tests' allowlist is localhost, 127.0.0.1/32, ::1).
        "http://10.0.0.5/tickets",
        "http://192.168.1.1/",
        "http://127.0.0.2:8100/",
        "http://8.8.8.8/",
        "http://0.0.0.0:8100/",
        "http://[::ffff:10.0.0.5]/",
        # Link-local: cloud metadata.
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://[::ffff:169.254.169.254]/",
        # A name that is not listed and does not resolve.
        "http://tools.example.invalid/",
    ],
)
def test_a_base_url_outside_the_policy_is_a_400_naming_it_and_writes_nothing(world, base_url):
    before = counts(world)
    response = register(world, base_url)
    assert response.status_code == 400, response.content
    body = problem(response)
    assert body["type"] == "/problems/validation-error"
    assert "base_url" in body["errors"], body
    assert counts(world) == before


@pytest.mark.parametrize(
    "base_url", ["http://127.0.0.1:8100/tickets", "http://localhost:8100/email", "http://[::1]:81/"]
)
def test_a_loopback_base_url_is_accepted(world, base_url):
    response = register(world, base_url)
    assert response.status_code == 201, response.content


def test_changing_a_tool_to_a_refused_url_is_refused_and_changes_nothing(world):
    tool = world.tool("update_ticket")
    before = counts(world)
    with pytest.raises(egress.ValidationFailed) as refused:
        tool_update(tool, actor=SETUP, base_url="http://169.254.169.254/")
    assert "base_url" in refused.value.extra["errors"]
    tool.refresh_from_db()
    assert tool.base_url == world.downstream.base("tickets")
    assert counts(world) == before


def test_allowlist_entries():
    rules = egress.parse_allowlist(
        " tools.acme.com, *.svc.acme.com ,10.20.0.0/16, 192.0.2.7, fd00::/8 ,169.254.169.254/32"
    )
    ip = egress.ipaddress.ip_address
    assert rules.name_listed("tools.acme.com") and rules.name_listed("TOOLS.acme.com.")
    assert rules.name_listed("a.svc.acme.com") and rules.name_listed("a.b.svc.acme.com")
    assert not rules.name_listed("svc.acme.com") and not rules.name_listed("evil-tools.acme.com")
    assert rules.address_allowed(ip("10.20.3.4")) and not rules.address_allowed(ip("10.21.0.1"))
    assert rules.address_allowed(ip("192.0.2.7")) and not rules.address_allowed(ip("192.0.2.8"))
    assert rules.address_allowed(ip("fd00::5"))
    assert rules.address_allowed(ip("::ffff:10.20.0.1"))  # IPv4-mapped is judged as IPv4
    # Listed explicitly, so this one metadata address is allowed; its neighbours are not.
    assert rules.address_allowed(ip("169.254.169.254"))
    assert not rules.address_allowed(ip("169.254.169.253"))
    # A listed name does not vouch for an inward address it resolves to.
    assert rules.address_allowed(ip("203.0.113.9"), host="tools.acme.com")
    assert not rules.address_allowed(ip("127.0.0.1"), host="tools.acme.com")
    assert not rules.address_allowed(ip("169.254.1.1"), host="tools.acme.com")


def test_link_local_needs_an_explicit_entry_not_a_broad_range():
    rules = egress.parse_allowlist("0.0.0.0/0,::/0")
    ip = egress.ipaddress.ip_address
    assert rules.address_allowed(ip("10.1.2.3"))
    assert not rules.address_allowed(ip("169.254.169.254"))
    assert not rules.address_allowed(ip("fe80::1"))


INWARD = ["127.0.0.1", "127.1.2.3", "::1", "0.0.0.0", "::", "169.254.169.254", "fe80::1"]


@pytest.mark.parametrize("broad", ["0.0.0.0/0,::/0", "0.0.0.0/0", "::/0", "0.0.0.0/1,128.0.0.0/1"])
@pytest.mark.parametrize("inward", INWARD)
def test_a_broad_range_never_allows_an_inward_address(broad, inward):
    rules = egress.parse_allowlist(broad)
    ip = egress.ipaddress.ip_address
    assert not rules.address_allowed(ip(inward))
    assert not rules.address_allowed(ip(inward), host="tools.acme.com")
    assert not rules.address_allowed(ip("::ffff:" + inward)) if "." in inward else True


@pytest.mark.parametrize(
    ("entry", "allowed", "refused"),
    [
        ("127.0.0.0/8", ["127.0.0.1", "127.9.9.9"], ["::1", "0.0.0.0", "169.254.169.254"]),
        ("::1", ["::1"], ["127.0.0.1", "::"]),
        ("0.0.0.0/32", ["0.0.0.0"], ["127.0.0.1"]),
        ("::/128", ["::"], ["::1"]),
        ("169.254.169.254/32", ["169.254.169.254"], ["169.254.169.253", "127.0.0.1"]),
    ],
)
def test_an_inward_address_is_allowed_when_listed_on_its_own(entry, allowed, refused):
    rules = egress.parse_allowlist(f"0.0.0.0/0,::/0,{entry}")
    ip = egress.ipaddress.ip_address
    for address in allowed:
        assert rules.address_allowed(ip(address)), address
    for address in refused:
        assert not rules.address_allowed(ip(address)), address


def test_a_localhost_name_entry_allows_loopback_for_localhost_only():
    """As README "The egress policy" says: the name `localhost` means loopback, so listing it
    allows the loopback addresses it resolves to, and only for that name."""
    rules = egress.parse_allowlist("localhost")
    ip = egress.ipaddress.ip_address
    assert rules.address_allowed(ip("127.0.0.1"), host="localhost")
    assert rules.address_allowed(ip("::1"), host="LOCALHOST.")
    assert not rules.address_allowed(ip("127.0.0.1"))  # the literal needs a CIDR entry
    assert not rules.address_allowed(ip("127.0.0.1"), host="evil.example")
    assert not rules.address_allowed(ip("169.254.169.254"), host="localhost")
    assert not rules.address_allowed(ip("10.0.0.1"), host="localhost")


def test_registration_under_a_broad_range_refuses_inward_literals(world, settings):
    settings.TOOL_URL_ALLOWLIST = "0.0.0.0/0,::/0"
    admin = world.admin.client()
    for url in ("http://127.0.0.1:8765/t", "http://[::1]:8765/t", "http://0.0.0.0:80/t"):
        body = {"name": "x", "base_url": url}
        response = admin.post("/api/v1/tools", body, format="json")
        assert response.status_code == 400, (url, response.content)
        assert "on its own" in " ".join(problem(response)["errors"]["base_url"])


def test_a_localhost_only_allowlist_reaches_a_tool_on_localhost(world, downstream, settings):
    settings.TOOL_URL_ALLOWLIST = "localhost"
    port = downstream.url.rsplit(":", 1)[1]
    response = world.admin.client().post(
        "/api/v1/tools",
        {"name": "local", "base_url": f"http://localhost:{port}/tickets"},
        format="json",
    )
    assert response.status_code == 201, response.content
    with egress.egress_client(5) as client:
        # Connected: the tool answers (refusing an unsigned read, as it should).
        assert client.get(f"http://localhost:{port}/tickets/state/none").status_code == 401
        with pytest.raises(httpx.ConnectError):
            client.get(f"http://127.0.0.1:{port}/tickets/state/none")


@pytest.mark.parametrize("url", ["http://127.0.0.1:0/hook", "https://localhost:0/hook"])
def test_a_webhook_url_on_port_0_is_refused_like_a_tool_url(url):
    from core.errors import ValidationFailed
    from notifications.services import validate_url

    with pytest.raises(ValidationFailed) as refused:
        validate_url(url)
    assert "Port 0" in " ".join(refused.value.extra["errors"]["url"])


def test_the_default_allowlist_is_loopback_only():
    rules = egress.parse_allowlist(egress.DEFAULT_ALLOWLIST)
    ip = egress.ipaddress.ip_address
    assert rules.address_allowed(ip("127.0.0.1")) and rules.address_allowed(ip("127.9.9.9"))
    assert rules.address_allowed(ip("::1")) and rules.name_listed("localhost")
    for outside in ("10.0.0.1", "172.16.0.1", "192.168.0.1", "8.8.8.8", "169.254.169.254"):
        assert not rules.address_allowed(ip(outside)), outside


@pytest.mark.parametrize("entry", ["*", "*.", "http://x.com", "a..b", "10.0.0.0/33", "x*.com"])
def test_a_bad_allowlist_entry_stops_the_process(entry):
    with pytest.raises(ImproperlyConfigured):
        egress.parse_allowlist(f"localhost,{entry}")


def test_the_connect_time_check_uses_the_resolved_address(downstream, monkeypatch, settings):
    """DNS rebinding: a listed name that now resolves inward is refused before anything is
    sent; resolving to an allowed address, the same call goes through to the real tool."""
    settings.TOOL_URL_ALLOWLIST = "127.0.0.1/32,rebind.test"
    port = int(downstream.url.rsplit(":", 1)[1])
    answer = {"rebind.test": "169.254.169.254"}
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if host in answer:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer[host], port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    egress.validate_base_url(f"http://rebind.test:{port}/tickets")  # the name is listed
    url = f"http://rebind.test:{port}/tickets/state/nope"
    with egress.egress_client(2) as client, pytest.raises(httpx.ConnectError, match="egress"):
        client.get(url)
    answer["rebind.test"] = "127.0.0.1"
    with egress.egress_client(2) as client:
        assert client.get(url).status_code == 401  # the demo downstream answered (unsigned)


def test_the_client_ignores_proxies_and_redirects(downstream, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://169.254.169.254:80")
    with egress.egress_client(2) as client:
        # Connected: the tool answers (and refuses an unsigned read, as it should).
        assert client.get(f"{downstream.url}/tickets/state/nope").status_code == 401
        assert client.follow_redirects is False


def test_a_cookie_a_tool_sets_is_never_sent_on(settings):
    """One client serves every tenant's tools: a cookie one tool sets must not ride along
    on the next call to that host (another tenant's tool, say)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen = []

    class Tool(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Cookie"))
            self.send_response(200)
            self.send_header("Set-Cookie", "session=tenant-a-secret; Path=/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Tool)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/state"
    try:
        with egress.egress_client(2) as client:
            for _ in range(2):
                assert client.get(url).status_code == 200
            assert list(client.cookies.jar) == []
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [None, None]


@pytest.fixture(scope="module")
def second_loopback():
    """A real tool server on 127.0.0.2: reachable, but outside the tests' allowlist."""
    ds = start_downstream(host="127.0.0.2")
    yield ds
    ds.process.terminate()
    ds.process.wait(10)


def test_an_action_whose_tool_became_disallowed_fails_not_sent(
    world, worker, second_loopback, settings
):
    # Registered while the deployer allowed it (in this process)...
    settings.TOOL_URL_ALLOWLIST = "127.0.0.0/8"
    world.tool("update_ticket", base_url=second_loopback.base("tickets"))
    assert httpx.get(f"{second_loopback.url}/tickets/state/t-1", timeout=5).status_code == 404
    # ...and the workers run with the narrower allowlist (tests/settings.py).
    run = world.start_run()
    response = world.propose(
        run["id"], "egress-1", tool="update_ticket", target="t-1", desired_state={"status": "x"}
    )
    assert response.status_code == 201, response.content
    action = world.wait_action(response.json()["id"])
    assert action["state"] == "failed", [(a["outcome"], a["detail"]) for a in action["attempts"]]
    assert action["failure_reason"] == "not_sent"
    assert all(a["outcome"] == "not_sent" for a in action["attempts"])
    assert "egress refused" in action["attempts"][0]["detail"]
    assert second_loopback.received("egress-1") == 0
    assert Action.objects.get(pk=action["id"]).state == "failed"
