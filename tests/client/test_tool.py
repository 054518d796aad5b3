"""A tool written with `takeover_client.tool`, served by real servers over real HTTP: gunicorn
(WSGI, which passes RAW_URI), wsgiref (WSGI without a raw URI: the canonical re-encoding) and
uvicorn (ASGI `raw_path`). Every call is signed as Takeover signs it (`signing.sign`) over the
path as it goes out on the wire."""

import json
import logging
import socket
import subprocess
import sys
import threading
import time
import uuid
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx
import pytest
import uvicorn
from takeover_client import signing
from takeover_client.tool import Rejected, Tool, VersionConflict

SECRET = "whsec_tool_test"
TOOL_SOURCE = """
from takeover_client.tool import Rejected, Tool, VersionConflict

def build(secrets):
    records, applied = {}, {}
    tool = Tool(secrets=secrets)

    @tool.apply
    def apply(effect):
        record = records.setdefault(effect.target, {"state": {}, "version": 0})
        if effect.desired_state.get("refuse"):
            raise Rejected("refused on purpose")
        if effect.expected_version not in (None, record["version"]):
            raise VersionConflict(record["version"])
        record["state"].update(effect.desired_state)
        record["version"] += 1
        applied[effect.key] = dict(record, state=dict(record["state"]))
        return record

    @tool.state
    def state(target):
        return records.get(target)

    @tool.lookup
    def lookup(key):
        return applied.get(key)

    return tool
"""


def build(secrets):
    namespace = {}
    exec(TOOL_SOURCE, namespace)  # the same tool in-process and in the gunicorn worker
    return namespace["build"](secrets)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module", params=["gunicorn", "wsgiref", "uvicorn"])
def server(request, tmp_path_factory):
    """(kind, base URL) of the tool, holding the old and the new secret of a rotation."""
    secrets = [SECRET, "whsec_previous"]
    if request.param == "wsgiref":
        httpd = make_server("127.0.0.1", 0, build(secrets).wsgi(), handler_class=Quiet)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        yield "wsgiref", f"http://127.0.0.1:{httpd.server_port}"
        httpd.shutdown()
        httpd.server_close()
    elif request.param == "uvicorn":
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(build(secrets).asgi(), log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        yield "uvicorn", f"http://127.0.0.1:{sock.getsockname()[1]}"
        server.should_exit = True
        thread.join(10)
    else:
        folder = tmp_path_factory.mktemp("gunicorn")
        (folder / "signed_tool.py").write_text(TOOL_SOURCE + f"\napp = build({secrets!r}).wsgi()\n")
        port = free_port()
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "gunicorn", "--chdir", str(folder)),
                *("-b", f"127.0.0.1:{port}", "-w", "1", "--no-control-socket"),
                # Mounted under a prefix, as a tool often is: PATH_INFO is relative to it,
                # the signature covers the whole path (RAW_URI).
                *("--env", "SCRIPT_NAME=/tools/tickets"),
                "signed_tool:app",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        yield "gunicorn", f"http://127.0.0.1:{port}/tools/tickets"
        process.terminate()
        process.wait(10)


def call(base, method, tail, *, body=None, key="", action="", secret=SECRET, **sign_options):
    """One call of the tool, signed over the raw path as httpx will send it."""
    url = httpx.URL(base + tail)
    raw = json.dumps(body).encode() if body is not None else b""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key:
        headers["Idempotency-Key"] = key
    if action:
        headers["X-Takeover-Action"] = action
    if secret:
        headers["Takeover-Signature"] = signing.sign(
            secret,
            method=method,
            path=url.raw_path.decode(),
            body=raw,
            action_id=action,
            key=key,
            **sign_options,
        )
    return httpx.request(method, url, content=raw, headers=headers, timeout=10)


def apply(base, target, desired, *, expected_version=None, key=None, **options):
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
    key = key or f"k-{uuid.uuid4().hex}"
    return call(base, "POST", "/effects", body=body, key=key, action=action, **options)


def state_path(target):
    return "/state/" + signing.segment(target)


def test_a_tool_is_a_few_functions_speaking_the_protocol(server):
    _, base = server
    t = f"T-{uuid.uuid4().hex[:8]}"
    applied = apply(base, t, {"status": "open"}, key=f"key-{t}")
    assert applied.status_code == 200, applied.text
    assert applied.json() == {"state": {"status": "open"}, "version": 1}
    assert call(base, "GET", state_path(t)).json() == {"state": {"status": "open"}, "version": 1}
    assert call(base, "GET", state_path("T-none")).status_code == 404
    stale = apply(base, t, {"status": "closed"}, expected_version=0)
    assert (stale.status_code, stale.json()["version"]) == (409, 1)
    assert apply(base, t, {"refuse": True}).status_code == 422
    found = call(base, "GET", "/effects/" + signing.segment(f"key-{t}"))
    assert found.json() == {"applied": True, "state": {"status": "open"}, "version": 1}
    malformed = call(base, "POST", "/effects", body={"target": t}, key="k", action="a")
    assert malformed.status_code == 400 and "missing fields" in malformed.json()["detail"]


def test_unsigned_tampered_late_and_foreign_calls_never_reach_the_functions(server, caplog):
    _, base = server
    t = f"T-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.WARNING, logger="takeover_client.verifier"):
        refused = [
            apply(base, t, {"status": "x"}, secret=None),
            apply(base, t, {"status": "x"}, secret="whsec_someone_else"),
            apply(base, t, {"status": "x"}, timestamp=int(time.time()) - 310),
            call(base, "GET", state_path(t), timestamp=int(time.time()) + 310),
        ]
    assert [r.status_code for r in refused] == [401] * 4
    assert refused[0].json() == {"error": "signature_refused", "detail": "no Takeover-Signature"}
    assert "matches none" in refused[1].json()["detail"]
    assert call(base, "GET", state_path(t)).status_code == 404  # nothing was applied

    # A body changed after signing: sign one intent, send another.
    action = str(uuid.uuid4())
    body = {
        "action_id": action,
        "tenant": "t",
        "principal": "agent",
        "tool": "update_ticket",
        "target": t,
        "desired_state": {"status": "open"},
        "expected_version": None,
    }
    signed = signing.sign(
        SECRET,
        method="POST",
        path=httpx.URL(base + "/effects").raw_path.decode(),
        body=json.dumps(body).encode(),
        action_id=action,
        key="k1",
    )
    body["desired_state"] = {"status": "refunded twice"}
    tampered = httpx.post(
        base + "/effects",
        json=body,
        headers={
            "Takeover-Signature": signed,
            "Idempotency-Key": "k1",
            "X-Takeover-Action": action,
        },
        timeout=10,
    )
    assert tampered.status_code == 401
    assert call(base, "GET", state_path(t)).status_code == 404
    if server[0] != "gunicorn":  # in this process: its log is ours to read
        assert any(
            r.getMessage().startswith("refused an unsigned call: POST /effects")
            for r in caplog.records
        )


def test_either_secret_of_a_rotation_is_accepted(server):
    _, base = server
    assert apply(base, "T-rot", {"status": "open"}, secret="whsec_previous").status_code == 200
    header_with_both = signing.sign(
        ["whsec_unknown_next", SECRET],
        method="GET",
        path=httpx.URL(base + "/state/T-rot").raw_path.decode(),
    )
    both = httpx.get(
        base + "/state/T-rot", headers={"Takeover-Signature": header_with_both}, timeout=10
    )
    assert both.status_code == 200


@pytest.mark.parametrize("name", ["..", ".", "a/b", "ünï cödé", "%2E", "k?x=1#f"])
def test_keys_and_targets_reach_the_functions_exactly_as_meant(server, name):
    kind, base = server
    key = name if name.isascii() else "k-ünï".encode().hex()  # a key is visible ASCII
    response = apply(base, name, {"status": "open"}, key=key)
    assert response.status_code == 200, response.text
    read = call(base, "GET", state_path(name))
    found = call(base, "GET", "/effects/" + signing.segment(key))
    if kind == "wsgiref" and "/" in name:
        # The documented quirk: without a raw URI the decoded "/" cannot be told from a
        # separator, the re-encoded path differs from the signed one, and the call is refused.
        assert (read.status_code, found.status_code) == (401, 401)
        return
    assert read.json() == {"state": {"status": "open"}, "version": 1}
    assert found.status_code == 200 and found.json()["applied"] is True


def test_a_tool_without_secrets_verifies_nothing():
    tool = Tool()
    tool.apply(lambda effect: {"state": effect.desired_state, "version": 1})
    body = {
        "action_id": "a",
        "tenant": "t",
        "principal": "p",
        "tool": "x",
        "target": "T",
        "desired_state": {"s": 1},
        "expected_version": None,
    }
    headers = {"Idempotency-Key": "k", "X-Takeover-Action": "a"}
    response = tool.handle("POST", "/effects", headers, json.dumps(body).encode())
    assert (response.status, response.body) == (200, {"state": {"s": 1}, "version": 1})
    assert tool.handle("GET", "/effects/k", {}).status == 501  # no lookup registered
    assert tool.handle("GET", "/effects", {}).status == 405
    assert Rejected and VersionConflict  # the names tool authors raise
