"""`make bench`'s floor (bench/floor.py) for real: gunicorn with the bare WSGI function and
the demo downstream, on a database of their own, effects from synchronous clients over HTTP,
and its figures back. The driver itself refuses any answer but `201 succeeded`, so every
effect counted went through the token, the intent, the tool and the outcome."""

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
import pytest
from takeover_client import signing

from bench import floor
from bench.management.commands.bench import admin_conninfo, recreate_database, run_floor

pytestmark = pytest.mark.django_db


def test_the_floor_drives_effects_over_http_and_reports_its_cost():
    said = []
    figures = run_floor(40, 2, say=said.append)
    assert said == ["-- the floor: 40 effects from 2 synchronous clients"]
    assert figures["effects_per_second"] > 0
    assert figures["p50_ms"] <= figures["p99_ms"]
    # The intent and the outcome: two write transactions each (the server's count, so
    # other tests' writes can only add to it).
    assert figures["xids_per_effect"] >= 1.9
    cpu = figures["cpu_ms"]
    assert {"client (this process)", "web", "tool (demo downstream)"} <= set(cpu)
    assert cpu["web"] > 0 and cpu["tool (demo downstream)"] > 0


def test_the_floor_writes_each_key_once_and_refuses_an_unknown_token(monkeypatch):
    """The floor's own rules, on a real database and a real HTTP tool: an unknown token is a
    401; a new key is written, called and settled; a key seen before is answered `replayed`
    without a second call or a second row."""
    from django.db import connection

    calls = []

    class Tool(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            calls.append((self.path, self.headers[signing.KEY_HEADER]))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    name = f"{connection.settings_dict['NAME']}_floortest"
    url = recreate_database(name)
    tool = ThreadingHTTPServer(("127.0.0.1", 0), Tool)
    threading.Thread(target=tool.serve_forever, daemon=True).start()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(floor.SCHEMA)
            conn.execute("INSERT INTO floor_token VALUES (encode(sha256('t0k3n'), 'hex'))")
        monkeypatch.setenv("FLOOR_DATABASE_URL", url)
        monkeypatch.setenv("FLOOR_TOOL", f"127.0.0.1:{tool.server_address[1]}")
        answers = [_call("nope", "k1"), _call("t0k3n", "k1"), _call("t0k3n", "k1")]
        floor._connection().close()
        assert [status for status, _ in answers] == ["401 Unauthorized", "201 Created", "200 OK"]
        assert answers[1][1]["state"] == "succeeded" and answers[2][1]["state"] == "replayed"
        assert calls == [(floor.EFFECTS_PATH, "k1")]
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT key, outcome FROM floor_effect").fetchall()
        assert rows == [("k1", "succeeded")]
    finally:
        tool.shutdown()
        tool.server_close()
        with psycopg.connect(admin_conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _call(token: str, key: str) -> tuple[str, dict]:
    """`floor.application` called as gunicorn calls it."""
    body = json.dumps({"target": "ticket:1", "desired_state": {"status": "done"}}).encode()
    environ = {
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "HTTP_IDEMPOTENCY_KEY": key,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }
    status = []
    out = floor.application(environ, lambda line, headers: status.append(line))
    return status[0], json.loads(b"".join(out))
