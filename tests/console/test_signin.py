"""Sign-in throttling: per account and per address, a clear lockout, audited, and cheap to
refuse; password hashing is bounded so a flood cannot take every web thread's CPU."""

import threading
import time
import uuid

import pytest
from axes.utils import reset
from django.db import connections
from django.test import Client

from core.models import AuditEvent
from tests.conftest import make_world

PASSWORD = "correct horse"


@pytest.fixture
def w(live_db, downstream):
    world = make_world(downstream)
    yield world
    reset()  # the tests' failures must not lock anyone else out


def attempt(username, password, address):
    client = Client(REMOTE_ADDR=address)
    return client.post("/login/", {"username": username, "password": password})


def address() -> str:
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 1}"


def test_wrong_passwords_lock_the_account_at_that_address_even_for_the_right_one(w, settings):
    name = w.oncall.username
    attacker = address()
    for i in range(settings.AXES_FAILURE_LIMIT):
        response = attempt(name, f"wrong-{i}", attacker)
        assert response.status_code in (200, 429)
    locked = attempt(name, PASSWORD, attacker)
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed sign-ins" in page and "locked here for 15 minutes" in page
    assert locked["Retry-After"] == "900"
    assert "_auth_user_id" not in locked.client.session
    event = AuditEvent.objects.get(tenant=w.tenant, verb="operator.locked_out")
    assert event.after == {"username": name, "ip_address": attacker}
    # Another account from that address is untouched.
    assert attempt(w.approver.username, PASSWORD, attacker).status_code == 302


def test_nobody_can_lock_a_named_person_out_from_their_own_address(w, settings):
    """Guessing someone's password from one address (or several) locks the guesser, not the
    person: they still sign in from theirs."""
    name = w.admin.username
    for guesser in ("198.51.100.7", "198.51.100.8", "198.51.100.9"):
        for i in range(settings.AXES_FAILURE_LIMIT + 2):
            attempt(name, f"guess-{i}", guesser)
        assert attempt(name, PASSWORD, guesser).status_code == 429
    assert attempt(name, PASSWORD, "203.0.113.20").status_code == 302


def test_wrong_passwords_from_one_address_across_accounts_lock_that_address(w, settings):
    here = address()
    for i in range(settings.SIGNIN_ADDRESS_FAILURE_LIMIT):
        response = attempt(f"nobody-{i}-{uuid.uuid4().hex[:6]}", "guess", here)
        assert response.status_code == 200, i  # each account only once: no per-account lock
    assert attempt(w.admin.username, PASSWORD, here).status_code == 429
    assert attempt(w.admin.username, PASSWORD, address()).status_code == 302


def test_a_refused_attempt_costs_no_password_hash(w, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    settings.AXES_FAILURE_LIMIT = 2
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username=w.oncall.username)
    user.set_password(PASSWORD)  # a real PBKDF2 hash, ~100+ ms to check
    user.save(update_fields=["password"])
    here = address()
    started = time.perf_counter()
    attempt(w.oncall.username, "wrong", here)
    hashed = time.perf_counter() - started
    attempt(w.oncall.username, "wrong", here)
    started = time.perf_counter()
    refused = [attempt(w.oncall.username, PASSWORD, here) for _ in range(10)]
    per_refusal = (time.perf_counter() - started) / 10
    assert {r.status_code for r in refused} == {429}
    assert per_refusal < hashed / 3, (per_refusal, hashed)


def test_sign_ins_beyond_the_hashing_slots_are_answered_at_once(w, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username=w.approver.username)
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    barrier = threading.Barrier(6)
    results = []

    def sign_in():
        barrier.wait()
        started = time.perf_counter()
        try:
            response = attempt(w.approver.username, PASSWORD, address())
            results.append((response.status_code, time.perf_counter() - started))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sign_in) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    codes = [code for code, _ in results]
    assert codes.count(302) >= 1
    busy = [seconds for code, seconds in results if code == 503]
    assert busy, codes  # six at once exceed one slot per process
    signed = [seconds for code, seconds in results if code == 302]
    assert max(busy) < min(signed), results  # refused without waiting for the hasher


def test_a_session_lasts_a_working_day_and_not_past_the_browser(w):
    client = Client(REMOTE_ADDR=address())
    response = client.post("/login/", {"username": w.oncall.username, "password": PASSWORD})
    assert response.status_code == 302
    cookie = response.cookies["sessionid"]
    assert not cookie["expires"] and not cookie["max-age"]  # ends with the browser
    assert cookie["httponly"]
    assert client.session.get_expiry_age() == 8 * 3600
