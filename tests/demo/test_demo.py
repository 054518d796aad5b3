"""The demo: its downstream speaks the tool protocol and injects each fault as its docstring
says (demo/downstream.py), over real HTTP; `manage.py seed_demo` creates the demo tenant once
and leaves it alone after."""

import io
import json
import socket
import time
import uuid

import httpx
import pytest
from django.core.management import call_command
from takeover_client import signing

from core.models import Membership, Principal, Tenant, Tool
from tests.conftest import start_downstream


@pytest.fixture(scope="module")
def ds():
    downstream = start_downstream()
    yield downstream
    downstream.process.terminate()
    downstream.process.wait(10)


def effect(ds, target, desired, expected_version=None, key=None):
    key = key or f"k-{uuid.uuid4().hex}"
    action = str(uuid.uuid4())
    body = {
        "action_id": action,
        "tenant": "t",
        "principal": "agent",
        "tool": "update_ticket",
        "target": target,
        "desired_state": desired,
        "expected_version": expected_version,
    }
    headers = {"Idempotency-Key": key, "X-Takeover-Action": action}
    return httpx.post(f"{ds.url}/tickets/effects", json=body, headers=headers, timeout=5)


def target() -> str:
    return f"T-{uuid.uuid4().hex[:8]}"


def test_apply_read_and_a_version_conflict(ds):
    t = target()
    applied = effect(ds, t, {"status": "open"})
    assert applied.status_code == 200
    assert applied.json() == {"state": {"status": "open"}, "version": 1}
    assert ds.read(t).json() == {"state": {"status": "open"}, "version": 1}
    stale = effect(ds, t, {"status": "closed"}, expected_version=0)
    assert stale.status_code == 409
    assert ds.read(t).json()["state"] == {"status": "open"}  # nothing changed
    assert ds.read("T-never-seen").status_code == 404


def test_a_malformed_effect_is_a_400_and_changes_nothing(ds):
    t = target()
    response = httpx.post(f"{ds.url}/tickets/effects", json={"target": t}, timeout=5)
    assert response.status_code == 400
    assert ds.mutations(t) == 0


@pytest.mark.parametrize(
    ("mode", "status", "applied"),
    [
        ("error_after_commit", 500, 1),
        ("reject", 422, 0),
        ("error_before_commit", 503, 0),
    ],
)
def test_answering_faults(ds, mode, status, applied):
    t = target()
    ds.fault(mode, prefix="tickets", target=t)
    assert effect(ds, t, {"status": "closed"}).status_code == status
    assert ds.mutations(t) == applied
    assert effect(ds, t, {"status": "closed"}).status_code == 200  # the rule is used up


def test_drop_after_commit_applies_then_answers_nothing(ds):
    t = target()
    ds.fault("drop_after_commit", prefix="tickets", target=t)
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        effect(ds, t, {"status": "closed"})
    assert ds.mutations(t) == 1


def test_slow_after_commit_applies_then_times_out_the_caller(ds):
    t = target()
    ds.fault("slow_after_commit", prefix="tickets", target=t, seconds=2)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{ds.url}/tickets/effects",
            json={
                "action_id": (a := str(uuid.uuid4())),
                "tenant": "t",
                "principal": "agent",
                "tool": "update_ticket",
                "target": t,
                "desired_state": {"status": "closed"},
                "expected_version": None,
            },
            headers={"Idempotency-Key": "k-slow", "X-Takeover-Action": a},
            timeout=0.5,
        )
    assert ds.mutations(t) == 1


def test_error_on_read_fails_the_read_only(ds):
    t = target()
    effect(ds, t, {"status": "open"})
    ds.fault("error_on_read", prefix="tickets", target=t, times=1)
    assert ds.read(t).status_code == 503
    assert ds.read(t).status_code == 200


def test_refuse_closes_the_port_for_a_while(ds):
    port = int(ds.url.rsplit(":", 1)[-1])
    ds.fault("refuse", seconds=1.0)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass
    deadline = time.monotonic() + 10
    while True:
        try:
            assert ds.read("T-back").status_code == 404
            break
        except httpx.ConnectError:
            assert time.monotonic() < deadline, "the port never came back"


def test_seed_demo_creates_the_demo_once(live_db, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    out = io.StringIO()
    call_command("seed_demo", "--downstream-url", "http://127.0.0.1:8100", stdout=out)
    tenant = Tenant.objects.get(slug="demo")
    tools = set(Tool.objects.filter(tenant=tenant).values_list("name", flat=True))
    assert {"update_ticket", "send_email"} <= tools
    assert Principal.objects.filter(tenant=tenant, name="demo-agent").exists()
    assert Membership.objects.filter(tenant=tenant).count() >= 3
    assert (tmp_path / "demo-agent.token").read_text().strip()

    again = io.StringIO()
    call_command("seed_demo", "--downstream-url", "http://127.0.0.1:8100", stdout=again)
    assert "already there" in again.getvalue()
    assert Tool.objects.filter(tenant=tenant).count() == len(tools)


# --- signed calls ---------------------------------------------------------------------------

SECRET = "whsec_demo_test"


def signed_effect(ds, target, *, secret=SECRET, timestamp=None, tamper=False):
    """A tool call as Takeover sends it, signed over the exact bytes that go out."""
    action = str(uuid.uuid4())
    key = f"k-{uuid.uuid4().hex}"
    body = {
        "action_id": action,
        "tenant": "t",
        "principal": "agent",
        "tool": "update_ticket",
        "target": target,
        "desired_state": {"status": "open"},
        "expected_version": None,
    }
    raw = json.dumps(body).encode()
    signature = signing.sign(
        secret,
        method="POST",
        path="/tickets/effects",
        body=raw,
        action_id=action,
        key=key,
        timestamp=timestamp,
    )
    if tamper:
        raw = raw.replace(b'"open"', b'"closed"')
    headers = {
        "Idempotency-Key": key,
        "X-Takeover-Action": action,
        "Takeover-Signature": signature,
        "Content-Type": "application/json",
    }
    return httpx.post(f"{ds.url}/tickets/effects", content=raw, headers=headers, timeout=5)


@pytest.fixture
def strict(tmp_path):
    """A downstream started with --require-signature, its log in a file."""
    log = tmp_path / "downstream.log"
    with open(log, "w") as stderr:
        downstream = start_downstream("127.0.0.1", "--require-signature", stderr=stderr)
    downstream.log = log
    downstream.control("POST", "secrets", {"secret": SECRET})
    yield downstream
    downstream.process.terminate()
    downstream.process.wait(10)


def test_a_required_signature_refuses_unsigned_tampered_late_and_foreign_calls(strict):
    t = target()
    assert signed_effect(strict, t).status_code == 200

    unsigned = effect(strict, t, {"status": "closed"})
    assert unsigned.status_code == 401
    assert unsigned.json() == {"error": "signature_refused", "detail": "no Takeover-Signature"}
    tampered = signed_effect(strict, t, tamper=True)
    late = signed_effect(strict, t, timestamp=int(time.time()) - 310)
    foreign = signed_effect(strict, t, secret="someone else's")
    assert [r.status_code for r in (tampered, late, foreign)] == [401, 401, 401]
    assert "from this server's clock" in late.json()["detail"]

    assert strict.mutations(t) == 1  # only the signed call changed anything
    stats = strict.stats()
    assert stats["refused"] == 4
    assert stats["signatures"] == {"valid": 1, "missing": 1, "invalid": 3}
    assert strict.read(t).status_code == 401  # reads are tool calls too
    lines = [line for line in strict.log.read_text().splitlines() if "refused" in line]
    assert lines[0].endswith(
        "refused an unsigned call: POST /tickets/effects (no Takeover-Signature)"
    )
    assert len(lines) == 5  # one line per refusal, although the server runs --quiet


def test_signatures_are_counted_but_not_required_by_default(ds):
    ds.control("POST", "secrets", {"secret": SECRET})
    before = ds.stats()["signatures"]
    assert effect(ds, target(), {"status": "open"}).status_code == 200
    assert signed_effect(ds, target()).status_code == 200
    after = ds.stats()["signatures"]
    assert after["missing"] == before["missing"] + 1
    assert after["valid"] == before["valid"] + 1
    assert ds.stats()["refused"] == 0


def test_requiring_signatures_is_switched_at_run_time_and_rotation_adds_a_secret(strict):
    t = target()
    strict.control("POST", "require-signature", {"require": False})
    assert effect(strict, t, {"status": "open"}).status_code == 200
    strict.control("POST", "require-signature", {"require": True})
    assert effect(strict, t, {"status": "open"}).status_code == 401
    assert signed_effect(strict, t, secret="the next secret").status_code == 401
    strict.control("POST", "secrets", {"secret": "the next secret"})
    assert signed_effect(strict, t, secret="the next secret").status_code == 200
    assert signed_effect(strict, t).status_code == 200  # the old one, during the overlap


def test_a_dot_segment_key_is_verified_on_the_path_as_sent(strict):
    raw_path = "/email/effects/" + signing.segment("..")
    header = signing.sign(SECRET, method="GET", path=raw_path, action_id="a", key="..")
    headers = {"Takeover-Signature": header, "X-Takeover-Action": "a", "Idempotency-Key": ".."}
    # httpx would collapse a literal "/.." segment; the encoded one reaches the server as is.
    response = httpx.get(f"{strict.url}{raw_path}", headers=headers, timeout=5)
    assert response.status_code == 404  # verified, then: the outbox never applied key ".."
    assert strict.stats()["lookups"]["email"] == {"..": 1}
