"""What the engine's scenarios share: unique targets and keys, an approval granted through the
API, proposing and waiting for the outcome, the reads and resends an action shows, a run's
finish and replay through the API, and a billing adapter this project did not write.

The billing adapter implements the capabilities the demo has its own way (201 with an empty
body, a lookup answer with extra fields, keys per tenant, switchable lies), so that nothing
passes only because the demo happens to behave like Takeover expects.
"""

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote

from core.models import AuditEvent
from core.services import tool_create
from runs.models import Action

from ..builders import SETUP


def target(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def key(name="k"):
    return f"evt-{uuid.uuid4().hex[:8]}:{name}"


def grant(
    w,
    *,
    tool="update_ticket",
    target,
    desired_state,
    expected_version=None,
    ttl=600,
    principal="agent",
):
    response = w.approver.client().post(
        "/api/v1/approvals",
        {
            "principal": principal,
            "tool": tool,
            "target": target,
            "desired_state": desired_state,
            "expected_version": expected_version,
            "ttl_seconds": ttl,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


class Billing:
    """A billing API behind a thin adapter. Its own habits:

    - it deduplicates on (tenant, Idempotency-Key) when `dedupe` is on, and answers a repeat
      201 with an empty body (the demo answers 200 with the first body);
    - its lookup (`lookup` on) answers 200 `{"applied": true, "charge_id", "state",
      "version", "at"}` or 404 with a plain-text body, and is keyed by the key alone, as
      the protocol's URL is;
    - `faults` is a queue of what the next effect requests meet: "apply_then_500",
      "apply_then_drop" (applied, connection closed with no answer), "503" (nothing
      applied);
    - with `dedupe` off it applies every request it gets: a tool that lies if it is
      declared idempotent.
    """

    def __init__(self, *, dedupe=True, lookup=True):
        self.dedupe, self.lookup = dedupe, lookup
        self.records: dict[str, dict] = {}
        self.charges: dict[tuple[str, str], dict] = {}  # (tenant, key) → the first result
        self.by_key: dict[str, dict] = {}
        self.applied = 0
        self.posts: list[str] = []  # Idempotency-Key of every POST /effects
        self.lookups: list[str] = []  # the raw path of every lookup
        self.state_reads = 0
        self.faults: list[str] = []
        self.lock = threading.Lock()

    def apply(self, tenant, key, effect) -> dict:
        record = self.records.setdefault(effect["target"], {"state": {}, "version": 0})
        record["state"].update(effect["desired_state"])
        record["version"] += 1
        self.applied += 1
        result = {
            "charge_id": f"ch_{self.applied}",
            "state": dict(record["state"]),
            "version": record["version"],
        }
        self.charges[(tenant, key)] = result
        self.by_key[key] = result
        return result


def billing_handler(billing):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status, payload=None, text=None):
            if text is not None:
                body, kind = text.encode(), "text/plain"
            else:
                body, kind = (b"" if payload is None else json.dumps(payload).encode()), "json"
            self.send_response(status)
            self.send_header("Content-Type", f"application/{kind}" if kind == "json" else kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            effect = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            key = self.headers["Idempotency-Key"]
            with billing.lock:
                billing.posts.append(key)
                fault = billing.faults.pop(0) if billing.faults else None
                if fault == "503":
                    return self._send(503, {"message": "try later"})
                seen = (effect["tenant"], key) in billing.charges
                if not (billing.dedupe and seen):
                    billing.apply(effect["tenant"], key, effect)
            if fault == "apply_then_500":
                return self._send(500, {"message": "oops"})
            if fault == "apply_then_drop":
                self.close_connection = True
                self.connection.close()
                return None
            return self._send(201)  # an empty body, repeat or not

        def do_GET(self):
            path = self.path.split("/billing", 1)[-1]
            if path.startswith("/effects/"):
                with billing.lock:
                    billing.lookups.append(self.path)
                if not billing.lookup:
                    return self._send(405, text="no lookups here")
                found = billing.by_key.get(unquote(path.removeprefix("/effects/")))
                if found is None:
                    return self._send(404, text="no such charge")
                return self._send(200, {"applied": True, **found, "at": "2026-12-01T00:00:00Z"})
            with billing.lock:
                billing.state_reads += 1
            record = billing.records.get(unquote(path.removeprefix("/state/")))
            if record is None:
                return self._send(404, {"message": "no such customer"})
            return self._send(200, record)

    return Handler


def billing_tool(w, billing, name="charge", **declarations):
    return tool_create(
        tenant=w.tenant,
        name=name,
        base_url=billing.url,
        timeout_seconds=2,
        actor=SETUP,
        **declarations,
    )


def propose_and_wait(w, run, tool, t, desired, k=None, timeout=40, **extra):
    response = w.propose(run["id"], k or key(), tool=tool, target=t, desired_state=desired, **extra)
    assert response.status_code == 201, response.content
    return w.wait_action(response.json()["id"], timeout=timeout)


def reads(action):
    return [(r["kind"], r["verdict"]) for r in action["reconciliations"]]


def resend_events(action_id):
    return list(
        AuditEvent.objects.filter(
            object_type="action",
            object_id=action_id,
            verb="action.dispatching",
            after__kind="resend",
        ).order_by("at")
    )


def unknown_out_of_reach(w, billing_server, **billing_options):
    """An unknown action at an idempotent billing tool, that the worker will not claim for
    an hour: made through the real flow (an unsafe tool's 503 → needs_human), then put back.
    Returns (billing, tool, action id)."""
    billing = billing_server(dedupe=True, lookup=False, **billing_options)
    tool = billing_tool(w, billing, effect="unsafe")
    billing.faults.append("503")
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 2})
    assert action["state"] == "needs_human"
    from datetime import timedelta

    from django.utils import timezone

    later = timezone.now() + timedelta(hours=1)
    Action.objects.filter(pk=action["id"]).update(state="unknown", next_reconcile_at=later)
    return billing, tool, action["id"]


def finish(w, run, status="error", tools_called=None, **extra):
    body = {"status": status, "tools_called": tools_called, **extra}
    response = w.agent.client().post(f"/api/v1/runs/{run['id']}/finish", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def replay(persona, run, tenant=None, **body):
    return persona.client(tenant).post(f"/api/v1/runs/{run['id']}/replay", body, format="json")
