"""A downstream this project did not write: a tiny CRM adapter built here on the standard
library alone, with its own habits (201 with an empty body, extra fields in its state, its
own deduplication on Idempotency-Key). Takeover must work with it through the protocol
alone."""

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

pytestmark = pytest.mark.worker


class Crm:
    def __init__(self):
        self.records = {}
        self.seen_keys = {}
        self.applied = 0
        self.drop_next_response = False
        self.lock = threading.Lock()


def make_handler(crm):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status, payload=None):
            body = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            if not self.path.endswith("/effects"):
                return self._send(404)
            effect = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            key = self.headers["Idempotency-Key"]
            with crm.lock:
                if key not in crm.seen_keys:  # this system deduplicates on its side
                    record = crm.records.setdefault(
                        effect["target"], {"state": {"tier": "free", "notes": ""}, "version": 0}
                    )
                    record["state"].update(effect["desired_state"])
                    record["version"] += 1
                    crm.applied += 1
                    crm.seen_keys[key] = effect["action_id"]
                drop, crm.drop_next_response = crm.drop_next_response, False
            if drop:
                self.connection.close()  # applied, but the answer is lost
                return None
            return self._send(201)

        def do_GET(self):
            target = unquote(self.path.rsplit("/state/", 1)[-1])
            with crm.lock:
                record = crm.records.get(target)
            if record is None:
                return self._send(404, {"message": "no such customer"})
            return self._send(200, {**record, "fetched_by": "crm-adapter"})

    return Handler


@pytest.fixture
def crm():
    crm = Crm()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(crm))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    crm.url = f"http://127.0.0.1:{server.server_address[1]}/crm"
    yield crm
    server.shutdown()


def test_foreign_tool_succeeds_and_a_lost_answer_is_reconciled(world, worker, crm):
    from core.services import tool_create

    from ...builders import SETUP

    tool_create(
        tenant=world.tenant, name="set_tier", base_url=crm.url, timeout_seconds=2, actor=SETUP
    )
    run = world.start_run()
    plain = world.propose(
        run["id"],
        f"k-{uuid.uuid4().hex}",
        tool="set_tier",
        target="cust 1/a",
        desired_state={"tier": "gold"},
    )
    assert world.wait_action(plain.json()["id"])["state"] == "succeeded"

    crm.drop_next_response = True
    key = f"k-{uuid.uuid4().hex}"
    lost = world.propose(
        run["id"],
        key,
        tool="set_tier",
        target="cust-2",
        desired_state={"tier": "platinum"},
        expected_version=0,
    )
    action = world.wait_action(lost.json()["id"])
    assert action["state"] == "succeeded"
    assert action["resolution"] == "reconciled"
    assert [a["outcome"] for a in action["attempts"]] == ["unknown"]
    assert crm.applied == 2
    assert crm.seen_keys[key] == action["id"]  # the key arrived bare, with the action id
