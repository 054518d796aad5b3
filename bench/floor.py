"""The floor of `make bench`: what one effect costs on this stack with nothing of Takeover's
in it, measured in the same run, so that Takeover's figures can be read against it.

An effect here does only what the product's rules leave no way around, on the same pieces Takeover
runs on: an HTTP request from the same client code into gunicorn (the same worker class,
2 processes × 8 threads) and a WSGI function (no Django), its bearer token looked up (one
indexed SELECT), the intent written under the key and committed, waiting for the disk,
before any byte goes out (one INSERT, `ON CONFLICT DO NOTHING`: the key's ledger in one row),
the demo downstream called on a fresh connection with a signed request, the outcome committed
(one UPDATE), the answer. No audit event, no approval, no tenant, no validation beyond the
JSON, no lease, no wake-up: what Takeover does beyond this is what the floor leaves out.

`application` is the WSGI function (gunicorn imports it: this module imports no Django);
`run` starts the downstream and gunicorn on a database of their own and drives them like
bench/phases.py's `effects` drives Takeover.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
from takeover_client import signing

SCHEMA = """
CREATE TABLE floor_token (key_hash text PRIMARY KEY);
CREATE TABLE floor_effect (
    key text PRIMARY KEY,
    target text NOT NULL,
    desired_state jsonb NOT NULL,
    outcome text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
"""
SECRET = "floor-signing-secret"
EFFECTS_PATH = "/tickets/effects"  # one of the demo downstream's systems, as Takeover's tool

# --- the WSGI function, in gunicorn's processes --------------------------------------------

_local = threading.local()


def _connection() -> psycopg.Connection:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(os.environ["FLOOR_DATABASE_URL"], autocommit=True)
    return conn


def _answer(start_response, status: str, body: dict) -> list[bytes]:
    out = json.dumps(body).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(out)))]
    )
    return [out]


def application(environ, start_response):
    conn = _connection()
    token = environ.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ")
    key_hash = hashlib.sha256(token.encode()).hexdigest()
    if conn.execute("SELECT 1 FROM floor_token WHERE key_hash = %s", [key_hash]).fetchone() is None:
        return _answer(start_response, "401 Unauthorized", {"title": "unauthorized"})
    body = json.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
    key = environ.get("HTTP_IDEMPOTENCY_KEY", "")
    action_id = str(uuid.uuid4())
    written = conn.execute(
        "INSERT INTO floor_effect (key, target, desired_state, outcome, created_at, updated_at) "
        "VALUES (%s, %s, %s, 'dispatching', now(), now()) "
        "ON CONFLICT (key) DO NOTHING RETURNING key",
        [key, body["target"], json.dumps(body["desired_state"])],
    ).fetchone()
    if written is None:
        return _answer(start_response, "200 OK", {"id": key, "state": "replayed"})
    payload = json.dumps(  # the tool protocol's body, as Takeover sends it
        {
            "action_id": action_id,
            "tenant": "floor",
            "principal": "floor",
            "tool": "update_ticket",
            "target": body["target"],
            "desired_state": body["desired_state"],
            "expected_version": None,
        }
    ).encode()
    headers = {
        "Content-Type": "application/json",
        signing.ACTION_HEADER: action_id,
        signing.KEY_HEADER: key,
        signing.SIGNATURE_HEADER: signing.sign(
            [SECRET], method="POST", path=EFFECTS_PATH, body=payload, action_id=action_id, key=key
        ),
    }
    tool = http.client.HTTPConnection(os.environ["FLOOR_TOOL"], timeout=10)
    try:
        tool.request("POST", EFFECTS_PATH, body=payload, headers=headers)
        response = tool.getresponse()
        response.read()
    finally:
        tool.close()
    state = "succeeded" if 200 <= response.status < 300 else "failed"
    conn.execute(
        "UPDATE floor_effect SET outcome = %s, updated_at = now() WHERE key = %s", [state, key]
    )
    return _answer(start_response, "201 Created", {"id": action_id, "state": state})


# --- the driver, in the bench's process ------------------------------------------------------


def run(url: str, *, effects: int, clients: int, postmaster: int | None, say) -> dict:
    """`effects` effects from `clients` synchronous clients (after 200 to warm up) against
    the floor on the database at `url` (fresh, on the same server as Takeover's): effects/s,
    latency p50/p99, write transactions and CPU ms per effect (per process group)."""
    from takeover.supervisor import Supervisor

    from . import loadgen

    tokens = [uuid.uuid4().hex for _ in range(clients)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
        for token in tokens:
            key_hash = hashlib.sha256(token.encode()).hexdigest()
            conn.execute("INSERT INTO floor_token VALUES (%s)", [key_hash])
    work_dir = Path(tempfile.mkdtemp(prefix="takeover-floor-"))
    supervisor, procs = Supervisor(grace=20), {}
    try:
        procs["tool (demo downstream)"], tool_url = loadgen.start_downstream(
            supervisor, "floor-downstream", env=dict(os.environ)
        )
        loadgen.LeanClient(tool_url, {}).post("/_control/secrets", json={"secret": SECRET})
        port = loadgen.free_port()
        env = {
            **os.environ,
            "FLOOR_DATABASE_URL": url,
            "FLOOR_TOOL": urlsplit(tool_url).netloc,
            "PYTHONPATH": str(loadgen.ROOT),
        }
        say(f"-- the floor: {effects} effects from {clients} synchronous clients")
        procs["web"] = supervisor.start(
            "floor-web",
            [
                sys.executable,
                *("-m", "gunicorn", "bench.floor:application"),
                *("-k", "gthread", "-w", "2", "--threads", "8"),
                *("-b", f"127.0.0.1:{port}", "--log-level", "warning"),
            ],
            env=env,
            log_path=work_dir / "web.log",
        )
        agents = [
            loadgen.LeanClient(f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {t}"})
            for t in tokens
        ]
        _wait_ready(f"http://127.0.0.1:{port}", procs["web"], work_dir)

        def drive(count: int) -> list[float]:
            prefix = uuid.uuid4().hex[:8]

            def share(t):
                mine = []
                for i in range(t, count, clients):
                    started = time.monotonic()
                    body = {"target": f"ticket:{prefix}-{i}", "desired_state": {"status": "done"}}
                    key = {"Idempotency-Key": f"floor-{prefix}-{i}"}
                    answer = agents[t].post(EFFECTS_PATH, json=body, headers=key)
                    if answer.status_code != 201 or answer.json()["state"] != "succeeded":
                        raise RuntimeError(f"the floor answered {answer.status_code} {answer.text}")
                    mine.append(time.monotonic() - started)
                return mine

            return [x for mine in loadgen.in_threads(clients, share) for x in mine]

        def cpu() -> dict:
            parts = {"client (this process)": loadgen.cpu_seconds([os.getpid()])}
            for part, child in procs.items():
                parts[part] = loadgen.cpu_seconds(child.pids())
            if postmaster:
                parts["postgresql"] = loadgen.server_cpu_seconds(postmaster)
            return parts

        drive(200)
        x0, c0, t0 = loadgen.xmax(url), cpu(), time.monotonic()
        latencies = drive(effects)
        elapsed = time.monotonic() - t0
        c1, x1 = cpu(), loadgen.xmax(url)
    finally:
        supervisor.stop(list(procs.values()))
    per = {part: (c1[part] - c0[part]) / effects * 1000 for part in c1}
    return {
        "effects_per_second": effects / elapsed,
        "p50_ms": loadgen.percentile(latencies, 0.5) * 1000,
        "p99_ms": loadgen.percentile(latencies, 0.99) * 1000,
        "xids_per_effect": (x1 - x0 - 1) / effects,
        "cpu_ms": per,
    }


def _wait_ready(url: str, web, work_dir: Path, timeout: float = 60) -> None:
    """Until the floor answers a call without a token (401)."""
    from . import loadgen

    deadline = time.monotonic() + timeout
    while True:
        if not web.running():
            raise RuntimeError("the floor's gunicorn died:\n" + (work_dir / "web.log").read_text())
        try:
            if loadgen.LeanClient(url, {}).post(EFFECTS_PATH, json={}).status_code == 401:
                return
        except (OSError, httpx.HTTPError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the floor's gunicorn did not come up")
        time.sleep(0.2)
