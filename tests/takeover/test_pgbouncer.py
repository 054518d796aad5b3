"""The settings work through PgBouncer in transaction pooling mode, and /readyz says so when
they do not (optional: skipped, with the reason, where PgBouncer is not installed;
`apt-get install pgbouncer`)."""

import json
import os
import shutil
import subprocess
import sys
import time

import psycopg
import pytest
from django.db import connection

from tests.conftest import ROOT, free_port

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
)
pytestmark = pytest.mark.skipif(
    PGBOUNCER is None,
    reason="PgBouncer is not installed (apt-get install pgbouncer); the pooled set-up is "
    "not tested here",
)


@pytest.fixture
def pgbouncer(live_db):
    s = connection.settings_dict
    host, port = s.get("HOST") or "127.0.0.1", s.get("PORT") or "5432"
    user = s.get("USER") or "postgres"
    home = ROOT / "var" / f"pgbouncer-{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    listen = free_port()
    (home / "userlist.txt").write_text(f'"{user}" "{s.get("PASSWORD") or ""}"\n')
    (home / "pgbouncer.ini").write_text(
        f"""[databases]
{s["NAME"]} = host={host} port={port} dbname={s["NAME"]}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = {"plain" if s.get("PASSWORD") else "trust"}
auth_file = {home / "userlist.txt"}
pool_mode = transaction
default_pool_size = 1
max_client_conn = 50
logfile = {home / "pgbouncer.log"}
pidfile = {home / "pgbouncer.pid"}
"""
    )
    argv = [PGBOUNCER, str(home / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; run it as the owner of the server's socket
        # directory (the embedded server's system user) so that it may connect there.
        owner = os.stat(host).st_uid if host.startswith("/") else None
        import pwd

        name = pwd.getpwuid(owner).pw_name if owner else "postgres"
        shutil.chown(home, user=name)
        for f in home.iterdir():
            shutil.chown(f, user=name)
        argv[1:1] = ["-u", name]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"postgresql://{user}@127.0.0.1:{listen}/{s['NAME']}"
    deadline = time.monotonic() + 15
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            break
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                log = (
                    (home / "pgbouncer.log").read_text()
                    if (home / "pgbouncer.log").exists()
                    else ""
                )
                pytest.fail(f"PgBouncer did not start: {process.stderr.read()!r} {log}")
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(10)
    shutil.rmtree(home, ignore_errors=True)


def test_a_startup_option_is_refused_by_pgbouncer(pgbouncer):
    """What the settings used to do: the reason for SET on connect."""
    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter"):
        psycopg.connect(pgbouncer, options="-c lock_timeout=10000", connect_timeout=5)


def through(pgbouncer, module: str, **env) -> dict:
    """Run tests.takeover.<module> with DATABASE_URL at PgBouncer; the JSON it printed."""
    result = subprocess.run(
        [sys.executable, "-m", f"tests.takeover.{module}"],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if k != "DATABASE_POOLER"},
            "DATABASE_URL": pgbouncer,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_services_and_api_work_through_pgbouncer_in_transaction_mode(pgbouncer):
    seen = through(pgbouncer, "pooled_flow", DATABASE_POOLER="transaction")
    assert seen["statuses"] == [201, 200] * 8
    assert seen["lock_timeout"] == "10s"


def test_readyz_is_503_naming_the_setting_behind_pgbouncer_without_it(pgbouncer):
    """Without DATABASE_POOLER=transaction the application prepares statements, which a
    transaction pooler hands to other clients: requests would fail with prepared-statement
    errors while /readyz said ready. It says not ready, and which setting fixes it."""
    seen = through(pgbouncer, "pooled_readyz")
    assert seen["status"] == 503
    body = seen["body"]
    assert body["failing"] == ["connection"]
    assert "DATABASE_POOLER=transaction" in body["detail"]
    assert body["checks"]["database"] == "ok" and body["checks"]["migrations"] == "ok"

    fixed = through(pgbouncer, "pooled_readyz", DATABASE_POOLER="transaction")
    assert fixed["status"] == 200, fixed
    assert fixed["body"]["checks"]["connection"] == "ok"
