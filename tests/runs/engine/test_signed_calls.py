"""Every request Takeover sends a tool is signed, and reaches it exactly as meant.

The tool here is written in the test on the standard library (not the project's demo
downstream): it records each request's method, raw path, headers and body, and answers like
a tool whose base resource also answers 200: `GET {base}` says "applied", `GET {base}/state`
says the desired state. A key of `..` collapsed by a URL library (`{base}/effects/..` →
`{base}`) or a target of `.` (`{base}/state/.` → `{base}/state`) would read those and settle
an action `succeeded` that nobody proved: the review's finding."""

import json
import threading
import time
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest
from django.utils import timezone
from takeover_client import signing

from core.models import Tool
from core.services import tool_create, tool_rotate_secret
from runs.models import Action

from ...builders import SETUP

pytestmark = pytest.mark.worker

# Keys are 1–255 visible ASCII characters; targets any text PostgreSQL stores.
KEYS = [
    ".", "..", "...", "./", "/..", "../x", "x/..", "a/./b", "%2e%2e", "%2E", "%", "%25",
    "?", "#", "?x=1", "#frag", "a?b#c", "/", "//", "a/b", "\\", "..\\..", ";", ";..", "~",
    "+", "&", "=", "@", ":", "[", "]", "{}", "|", "^", "`", "'", '"', "<>", "*", "!$(),",
    "..;", ".%2e", "%2e.", "effects", "state", "a" * 255, ".a", "a.", "%2f..",
]  # fmt: skip
TARGETS = [
    ".", "..", "...", "a  b", "a b", "a/b", "../../etc/passwd", "%", "%2F", "?", "#", "é", "☃",
    "a\tb", "a\nb", "..\\", "x" * 500, ";", "~user", "CON", "state", "effects", "/", "//x",
    "a?b", "a#b", "+", "&amp;", "\u202e", "𝔘", ".hidden", "..%2f", "%00", "a" * 3, "[::1]",
    ":", "@", "=", "!", "'", '"', "<", ">", "{", "}", "|", "^", "`", "*", ",",
]  # fmt: skip


class RecordingTool:
    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()

    def handler(tool):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, payload=None):
                body = json.dumps(payload or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with tool.lock:
                    tool.requests.append((self.command, self.path, dict(self.headers), body))

            def do_POST(self):
                self._record()
                self._answer(500, {"error": "applied, maybe; this tool will not say"})

            def do_GET(self):
                self._record()
                rest = self.path[len(tool.prefix) :]
                if rest.startswith(("/effects/", "/state/")) and rest.count("/") == 2:
                    return self._answer(404, {"error": "never saw it"})
                # The base resource and anything else: a 200 that a collapsed path would read.
                return self._answer(200, {"applied": True, "state": {"s": "x"}, "version": 1})

        return Handler


@pytest.fixture
def recording_tool():
    tool = RecordingTool()
    server = ThreadingHTTPServer(("127.0.0.1", 0), tool.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tool.prefix = "/tool"
    tool.url = f"http://127.0.0.1:{server.server_address[1]}{tool.prefix}"
    yield tool
    server.shutdown()


def settled(action_ids, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = dict(Action.objects.filter(pk__in=action_ids).values_list("pk", "state"))
        if all(s not in {"queued", "dispatching", "unknown"} for s in states.values()):
            return states
        time.sleep(0.2)
    raise AssertionError(f"not settled: {states}")


def test_adversarial_keys_and_targets_reach_the_tool_exactly_and_signed(
    world, worker, recording_tool
):
    tool = tool_create(
        tenant=world.tenant,
        name="recorded",
        base_url=recording_tool.url,
        lookup=True,
        timeout_seconds=2,
        actor=SETUP,
    )
    run = world.start_run()
    proposed = {}
    for key, target in zip(KEYS, TARGETS, strict=True):
        response = world.propose(
            run["id"], key, tool="recorded", target=target, desired_state={"s": "x"}
        )
        assert response.status_code == 201, (key, response.content)
        proposed[response.json()["id"]] = (key, target)
    assert len(proposed) == 50

    states = settled(list(proposed))
    # The tool answered every apply with 500 and never confirmed a key: nothing is proven.
    assert set(states.values()) == {"needs_human"}, states

    by_action = {}
    for method, path, headers, body in recording_tool.requests:
        by_action.setdefault(headers["X-Takeover-Action"], []).append((method, path, headers, body))
    for action_id, (key, target) in proposed.items():
        seen = {(m, p) for m, p, _, _ in by_action[action_id]}
        apply = ("POST", "/tool/effects")
        lookup = ("GET", f"/tool/effects/{signing.segment(key)}")
        read = ("GET", f"/tool/state/{signing.segment(target)}")
        # The apply may never have been sent: a worker that lost its lease before sending
        # must not send (the sweeper then finds nothing and hands it over). Every request
        # that was sent is one of the three, at its exact path.
        assert {lookup, read} <= seen <= {apply, lookup, read}, (key, target, seen)
        assert unquote(lookup[1].rsplit("/", 1)[1]) == key
        assert unquote(read[1].rsplit("/", 1)[1]) == target
        for method, path, headers, body in by_action[action_id]:
            assert headers["Idempotency-Key"] == key
            signing.verify(
                tool.signing_secret, method=method, path=path, body=body, headers=headers
            )


def test_a_rotated_secret_signs_beside_the_new_one_until_its_overlap_ends(
    world, worker, recording_tool
):
    tool = tool_create(
        tenant=world.tenant, name="rotating", base_url=recording_tool.url, actor=SETUP
    )
    old = tool.signing_secret
    new = tool_rotate_secret(tool, overlap_seconds=3600, actor=SETUP).signing_secret
    run = world.start_run()

    def one_call():
        recording_tool.requests.clear()
        key = f"k-{uuid.uuid4().hex}"
        action = world.propose(run["id"], key, tool="rotating", target="t", desired_state={})
        settled([action.json()["id"]])
        method, path, headers, body = recording_tool.requests[0]
        return method, path, headers, body

    method, path, headers, body = one_call()
    for secret in (old, new):  # a tool holding either secret accepts it
        signing.verify(secret, method=method, path=path, body=body, headers=headers)
    _, signatures = signing.parse(headers[signing.SIGNATURE_HEADER])
    assert len(signatures) == 2

    Tool.objects.filter(pk=tool.pk).update(
        previous_secret_expires_at=timezone.now() - timedelta(seconds=1)
    )
    method, path, headers, body = one_call()
    signing.verify(new, method=method, path=path, body=body, headers=headers)
    with pytest.raises(signing.SignatureError):
        signing.verify(old, method=method, path=path, body=body, headers=headers)


def test_a_tampered_or_stale_signed_request_is_refused_by_the_verifier(
    world, worker, recording_tool
):
    """What a verifying tool sees, with the requests Takeover really sent."""
    tool = tool_create(
        tenant=world.tenant, name="checked", base_url=recording_tool.url, actor=SETUP
    )
    run = world.start_run()
    action = world.propose(run["id"], "k-tamper", tool="checked", target="t", desired_state={})
    settled([action.json()["id"]])
    method, path, headers, body = recording_tool.requests[0]
    secret = tool.signing_secret
    signing.verify(secret, method=method, path=path, body=body, headers=headers)
    sent_at, _ = signing.parse(headers[signing.SIGNATURE_HEADER])
    refused = [
        dict(body=body.replace(b'"t"', b'"u"')),  # another target
        dict(path=path + "x"),
        dict(method="PUT"),
        dict(headers={**headers, "Idempotency-Key": "k-other"}),
        dict(headers={**headers, "X-Takeover-Action": str(uuid.uuid4())}),
        dict(headers={k: v for k, v in headers.items() if k != signing.SIGNATURE_HEADER}),
        dict(now=sent_at + 301),  # a replay more than five minutes later
    ]
    for change in refused:
        request = dict(method=method, path=path, body=body, headers=headers) | change
        with pytest.raises(signing.SignatureError):
            signing.verify(secret, **request)
    with pytest.raises(signing.SignatureError):
        signing.verify("tks_not-this-tools", method=method, path=path, body=body, headers=headers)
