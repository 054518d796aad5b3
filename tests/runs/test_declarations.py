"""Tools that say what they are (issue 13): effect declarations (`read_only`, `idempotent`,
`unsafe`) and `lookup: true` drive reconciliation, resends and the replay verdict.

Real HTTP, a real Celery worker, real PostgreSQL. Two downstreams: the project's demo
(tickets `unsafe`, the outbox `idempotent` with lookup, the ticket search `read_only`) and a
billing adapter written here, which implements the same capabilities its own way (201 with
an empty body, a lookup answer with extra fields, keys per tenant, switchable lies), so that
nothing passes only because the demo happens to behave like Takeover expects.
"""

import itertools
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

from core.models import AuditEvent, Tool
from core.services import tool_create
from ledger.models import LedgerEntry
from runs.models import Action, Attempt

from ..builders import SETUP
from ..conftest import problem

pytestmark = pytest.mark.worker


def target(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def key(name="k"):
    return f"evt-{uuid.uuid4().hex[:8]}:{name}"


# --- an adapter this project did not write --------------------------------------------------


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


@pytest.fixture
def billing_server():
    servers = []

    def start(**options):
        billing = Billing(**options)
        server = ThreadingHTTPServer(("127.0.0.1", 0), billing_handler(billing))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        billing.url = f"http://127.0.0.1:{server.server_address[1]}/billing"
        servers.append(server)
        return billing

    yield start
    for server in servers:
        server.shutdown()


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


@pytest.fixture
def w(world, worker):
    world.tool("update_ticket")  # unsafe, no lookup: exactly as before issue 13
    world.tool("send_email", prefix="email", effect="idempotent", lookup=True)
    world.tool("search_tickets", prefix="search", effect="read_only")
    return world


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


# --- lookup ----------------------------------------------------------------------------------


def test_commit_then_drop_on_a_lookup_tool_settles_by_lookup_with_one_mutation(w):
    run = w.start_run()
    t = target("alice") + "@example.com"
    w.downstream.fault("drop_after_commit", prefix="email", target=t)
    action = propose_and_wait(w, run, "send_email", t, {"subject": "Renewal", "body": "Hi"})

    assert action["state"] == "succeeded"
    assert action["resolution"] == "reconciled"
    assert [a["outcome"] for a in action["attempts"]] == ["unknown"]  # never sent again
    assert reads(action) == [("lookup", "lookup_applied")]
    lookup = action["reconciliations"][0]
    assert lookup["authoritative"] == {"state": {"subject": "Renewal", "body": "Hi"}, "version": 1}
    assert lookup["declaration"]["effect"] == "idempotent"
    assert lookup["declaration"]["lookup"] is True
    assert lookup["detail"] == f"the tool reports it applied key {action['idempotency_key']}"
    assert w.downstream.mutations(t, prefix="email") == 1
    assert w.downstream.received(action["idempotency_key"]) == 1
    # No field heuristics: the state was never read.
    assert w.downstream.stats()["state_reads_by_target"]["email"].get(t, 0) == 0
    # No person: the reconciler settled it, and says why.
    settled = AuditEvent.objects.get(
        object_type="action", object_id=action["id"], verb="action.succeeded"
    )
    assert settled.actor == {"kind": "system", "name": "reconciler"}
    assert "lookup" in settled.reason


def test_the_independent_adapter_is_settled_by_its_own_lookup_too(w, billing_server):
    billing = billing_server(dedupe=True, lookup=True)
    billing_tool(w, billing, effect="unsafe", lookup=True)  # lookup alone, no dedupe claim
    billing.faults.append("apply_then_drop")
    run = w.start_run()
    # A key with characters that must be quoted in a URL path.
    k = f"inv/{uuid.uuid4().hex[:6]}?#%20x"
    action = propose_and_wait(w, run, "charge", "cust 7/b", {"amount": 1200}, k=k)

    assert action["state"] == "succeeded", action
    assert action["resolution"] == "reconciled"
    assert reads(action) == [("lookup", "lookup_applied")]
    assert billing.applied == 1 and billing.posts == [k]
    assert billing.state_reads == 0
    from urllib.parse import quote

    assert billing.lookups == [f"/billing/effects/{quote(k, safe='')}"]


def test_never_received_is_shown_and_an_unsafe_tool_still_goes_to_a_person(w, billing_server):
    billing = billing_server(dedupe=False, lookup=True)
    billing_tool(w, billing, effect="unsafe", lookup=True)
    billing.faults.append("503")  # nothing applied; "never received" is then the truth
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 5})

    assert action["state"] == "needs_human"
    assert reads(action) == [("lookup", "lookup_not_found"), ("state", "missing")]
    assert action["reconciliations"][0]["detail"] == (
        f"the tool reports it never received key {action['idempotency_key']}"
    )
    assert len(billing.posts) == 1  # unsafe: never re-sent past the boundary
    moved = AuditEvent.objects.get(
        object_type="action", object_id=action["id"], verb="action.needs_human"
    )
    assert "never received key" in moved.reason


def test_a_lookup_that_cannot_tell_falls_back_to_the_state_read(w):
    # The ticket system keeps no record of keys: its lookup answers 501.
    Tool.objects.filter(tenant=w.tenant, name="update_ticket").update(lookup=True)
    run = w.start_run()
    t = target()
    w.downstream.fault("error_after_commit", prefix="tickets", target=t)
    action = propose_and_wait(w, run, "update_ticket", t, {"status": "open"})

    assert action["state"] == "succeeded"
    assert action["resolution"] == "reconciled"
    assert reads(action) == [("lookup", "lookup_failed"), ("state", "match")]
    assert "501" in action["reconciliations"][0]["detail"]
    assert [a["outcome"] for a in action["attempts"]] == ["unknown"]
    assert w.downstream.mutations(t) == 1


# --- resends to idempotent tools ----------------------------------------------------------


def test_commit_then_500_on_an_idempotent_tool_is_resent_with_the_same_key(w):
    # The demo outbox deduplicates; declared idempotent *without* lookup, so Takeover's only
    # way to find out is to ask again.
    Tool.objects.filter(tenant=w.tenant, name="send_email").update(lookup=False)
    run = w.start_run()
    t = target("bob") + "@example.com"
    w.downstream.fault("error_after_commit", prefix="email", target=t)
    action = propose_and_wait(w, run, "send_email", t, {"subject": "Hello"})

    assert action["state"] == "succeeded"
    assert action["resolution"] == "applied"
    assert [(a["number"], a["kind"], a["outcome"]) for a in action["attempts"]] == [
        (1, "send", "unknown"),
        (2, "resend", "applied"),
    ]
    assert action["attempts"][1]["declaration"]["effect"] == "idempotent"
    assert action["reconciliations"] == []  # no state read, no lookup: the resend decided
    # The tool saw two requests under one key, and applied one.
    assert w.downstream.received(action["idempotency_key"]) == 2
    assert w.downstream.mutations(t, prefix="email") == 1
    assert w.downstream.stats()["deduplicated"][action["idempotency_key"]] == 1
    (event,) = resend_events(action["id"])
    assert event.before == {"state": "unknown"}
    assert event.after["attempt"] == 2
    assert event.after["idempotency_key"] == action["idempotency_key"]
    assert event.after["declaration"]["effect"] == "idempotent"
    assert "declared idempotent" in event.reason
    # The backoff: the resend started at least IDEMPOTENT_RESEND_DELAY_SECONDS after.
    first, second = Attempt.objects.filter(action_id=action["id"]).order_by("number")
    assert (second.started_at - first.finished_at).total_seconds() >= 0.5


def test_the_independent_adapter_is_resent_and_applies_once(w, billing_server):
    billing = billing_server(dedupe=True, lookup=False)
    billing_tool(w, billing, effect="idempotent")
    billing.faults.append("apply_then_500")
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 30})

    assert action["state"] == "succeeded"
    assert [a["kind"] for a in action["attempts"]] == ["send", "resend"]
    assert len(billing.posts) == 2 and len(set(billing.posts)) == 1
    assert billing.applied == 1


def test_idempotent_with_lookup_asks_first_and_resends_only_what_was_never_received(w):
    run = w.start_run()
    t = target("carol") + "@example.com"
    w.downstream.fault("error_before_commit", prefix="email", target=t)  # 503, nothing applied
    action = propose_and_wait(w, run, "send_email", t, {"subject": "Hi"})

    assert action["state"] == "succeeded"
    assert [(a["kind"], a["outcome"]) for a in action["attempts"]] == [
        ("send", "unknown"),
        ("resend", "applied"),
    ]
    # Asked before resending (at the unknown, and again when the backoff was over).
    assert reads(action)[0] == ("lookup", "lookup_not_found")
    assert set(reads(action)) == {("lookup", "lookup_not_found")}
    assert w.downstream.mutations(t, prefix="email") == 1
    assert w.downstream.received(action["idempotency_key"]) == 2


def test_resends_are_bounded_and_what_stays_unproven_goes_to_a_person(w, billing_server):
    billing = billing_server(dedupe=True, lookup=False)
    billing_tool(w, billing, effect="idempotent")
    billing.faults += ["503", "503", "503"]
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 1}, timeout=60)

    assert action["state"] == "needs_human"
    assert [(a["number"], a["kind"], a["outcome"]) for a in action["attempts"]] == [
        (1, "send", "unknown"),
        (2, "resend", "unknown"),
        (3, "resend", "unknown"),  # IDEMPOTENT_RESEND_LIMIT = 2
    ]
    assert len(billing.posts) == 3 and billing.applied == 0
    assert reads(action) == [("state", "missing")]  # then the usual read, and a person
    attempts = list(Attempt.objects.filter(action_id=action["id"]).order_by("number"))
    gaps = [(b.started_at - a.finished_at).total_seconds() for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.5 and gaps[1] >= 1.0  # the backoff doubles


def test_the_same_fault_on_an_unsafe_tool_is_never_resent(w, billing_server):
    # The demo's ticket system (unsafe): reconciled, as before issue 13 ...
    run = w.start_run()
    t = target()
    w.downstream.fault("error_after_commit", prefix="tickets", target=t)
    reconciled = propose_and_wait(w, run, "update_ticket", t, {"status": "open"})
    assert reconciled["state"] == "succeeded" and reconciled["resolution"] == "reconciled"
    assert [a["kind"] for a in reconciled["attempts"]] == ["send"]
    assert reads(reconciled) == [("state", "match")]
    assert w.downstream.received(reconciled["idempotency_key"]) == 1
    # ... or needs_human, never resent, even when the tool deduplicates (it did not say so).
    billing = billing_server(dedupe=True, lookup=False)
    billing_tool(w, billing, effect="unsafe")
    billing.faults.append("503")
    human = propose_and_wait(w, run, "charge", target("cust"), {"amount": 9})
    assert human["state"] == "needs_human"
    assert [a["kind"] for a in human["attempts"]] == ["send"]
    assert len(billing.posts) == 1
    assert resend_events(human["id"]) == []


def test_a_tool_that_lies_is_resent_and_the_audit_names_the_declaration(w, billing_server):
    """Declared idempotent, applies twice. Not Takeover's fault, but visible: the resend's
    audit event holds the declaration that allowed it, and who made it."""
    billing = billing_server(dedupe=False, lookup=False)
    billing_tool(w, billing, effect="unsafe")
    declared = w.admin.client().post(
        "/api/v1/tools/charge/declaration",
        {"effect": "idempotent", "reason": "the vendor's docs say charges dedupe on the key"},
        format="json",
    )
    assert declared.status_code == 200, declared.content
    billing.faults.append("apply_then_500")
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 70})

    assert action["state"] == "succeeded"
    assert billing.applied == 2  # the lie
    (event,) = resend_events(action["id"])
    admin = {"kind": "operator", "name": w.admin.username}
    assert event.after["declaration"]["effect"] == "idempotent"
    assert event.after["declaration"]["declared_by"] == admin
    assert f"declared by operator:{w.admin.username}" in event.reason
    assert action["attempts"][1]["declaration"]["declared_by"] == admin
    # ... and the declaration itself is on record, with its reason.
    change = AuditEvent.objects.get(object_type="tool", verb="tool.declare", tenant=w.tenant)
    assert change.before == {"effect": "unsafe", "lookup": False}
    assert change.after == {"effect": "idempotent", "lookup": False}
    assert change.reason == "the vendor's docs say charges dedupe on the key"


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


def test_a_person_rechecking_reads_but_never_sends(w, billing_server):
    billing, tool, action_id = unknown_out_of_reach(w, billing_server)
    Tool.objects.filter(pk=tool.pk).update(effect="idempotent")
    response = w.oncall.client().post(f"/api/v1/actions/{action_id}/reconcile", {})
    assert response.status_code == 200
    action = response.json()
    assert len(billing.posts) == 1  # the first send only
    assert reads(action)[-1] == ("state", "missing")
    # The resend is still due, so the person's read leaves it unknown for it.
    assert action["state"] == "unknown"


def test_unsafe_never_moves_back_past_the_boundary_by_table():
    from core.errors import IllegalTransition
    from runs.states import (
        DECLARED_MOVES,
        TRANSITIONS,
        ActionState,
        check_declared_move,
        check_move,
    )

    with pytest.raises(IllegalTransition):
        check_move(ActionState.UNKNOWN, ActionState.DISPATCHING)  # not an ordinary move
    with pytest.raises(IllegalTransition):
        check_declared_move(ActionState.UNKNOWN, ActionState.DISPATCHING, effect="unsafe")
    check_declared_move(ActionState.UNKNOWN, ActionState.DISPATCHING, effect="idempotent")
    assert all(target != ActionState.QUEUED for _, target in DECLARED_MOVES)
    assert all(
        ActionState.QUEUED not in TRANSITIONS[s]
        for s in (ActionState.DISPATCHING, ActionState.UNKNOWN)
    )


def test_a_resend_is_refused_once_the_tool_is_declared_unsafe(w, billing_server):
    """The claim re-reads the declaration under a lock: a change made after a worker decided
    to resend, but before its claim, wins."""
    from runs.engine.reconcile import action_resend_start

    billing, tool, action_id = unknown_out_of_reach(w, billing_server)
    stale = Action.objects.select_related("tool").get(pk=action_id)
    stale.tool.effect = "idempotent"  # what a worker believed a moment ago
    assert action_resend_start(stale, actor=SETUP) is None
    assert Action.objects.get(pk=action_id).state == "unknown"
    Tool.objects.filter(pk=tool.pk).update(effect="idempotent")
    attempt = action_resend_start(stale, actor=SETUP)
    assert attempt is not None and attempt.kind == "resend" and attempt.number == 2
    assert attempt.declaration["effect"] == "idempotent"
    assert Action.objects.get(pk=action_id).state == "dispatching"
    assert len(billing.posts) == 1  # claimed, not sent: the call is the caller's next step


def test_a_resend_whose_worker_was_lost_comes_back_through_its_lease(w, billing_server):
    """A resend is a dispatch: claimed under a lease, so a worker lost mid-call is swept back
    to unknown (its attempt closed as unknown), and the next resend is the next attempt."""
    from datetime import timedelta

    from django.utils import timezone

    from runs.engine.reconcile import action_resend_start

    billing, tool, action_id = unknown_out_of_reach(w, billing_server)
    Tool.objects.filter(pk=tool.pk).update(effect="idempotent")
    claimed = action_resend_start(
        Action.objects.select_related("tool").get(pk=action_id), actor=SETUP
    )
    assert claimed.number == 2
    # The worker holding it dies before the call: its lease runs out; the worker's sweeper
    # (beat, every second in the tests) takes it from here.
    Action.objects.filter(pk=action_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    action = w.wait_action(action_id, until={"succeeded", "needs_human", "failed"}, timeout=40)
    assert action["state"] == "succeeded"
    assert [(a["number"], a["kind"], a["outcome"]) for a in action["attempts"]] == [
        (1, "send", "unknown"),
        (2, "resend", "unknown"),  # never sent: "dispatch lease expired"
        (3, "resend", "applied"),
    ]
    assert "lease expired" in action["attempts"][1]["detail"]
    assert len(billing.posts) == 2  # the first send and attempt 3


# --- read_only -----------------------------------------------------------------------------


def test_read_only_needs_no_key_no_approval_and_takes_no_ledger_key_space(w):
    run = w.start_run()
    w.downstream.seed(target("T"), {"status": "open"})
    response = w.agent.client().post(
        f"/api/v1/runs/{run['id']}/actions",
        {"tool": "search_tickets", "target": "open", "desired_state": {"status": "open"}},
        format="json",
    )  # no Idempotency-Key header
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["effect"] == "read_only"
    assert body["idempotency_key"] == f"read:{body['id']}"
    done = w.wait_action(body["id"])
    assert done["state"] == "succeeded"
    assert '"matches"' in done["attempts"][0]["detail"]
    assert Action.objects.get(pk=body["id"]).ledger_entry_id is None

    # A key shared with a side effect neither collides nor makes the read a ledger hit.
    shared = key("shared")
    first = w.propose(
        run["id"], shared, tool="search_tickets", target="open", desired_state={"x": 1}
    )
    again = w.propose(
        run["id"], shared, tool="search_tickets", target="open", desired_state={"x": 1}
    )
    write = w.propose(
        run["id"], shared, tool="update_ticket", target=target(), desired_state={"s": 1}
    )
    assert (first.status_code, again.status_code, write.status_code) == (201, 201, 201)
    assert first.json()["id"] != again.json()["id"]
    assert LedgerEntry.objects.filter(tenant=w.tenant, key=shared).count() == 1  # the write's

    # A side-effecting tool still needs its key.
    missing = w.agent.client().post(
        f"/api/v1/runs/{run['id']}/actions",
        {"tool": "update_ticket", "target": "x", "desired_state": {"s": 1}},
        format="json",
    )
    assert problem(missing)["type"] == "/problems/idempotency-key-missing"


def test_a_read_only_tool_cannot_require_approval(w):
    response = w.admin.client().post(
        "/api/v1/tools",
        {
            "name": "lookup_customer",
            "base_url": w.downstream.base("search"),
            "effect": "read_only",
            "requires_approval": True,
        },
        format="json",
    )
    assert response.status_code == 400
    assert "requires_approval" in problem(response)["errors"]
    tool = Tool.objects.get(tenant=w.tenant, name="update_ticket")
    Tool.objects.filter(pk=tool.pk).update(requires_approval=True)
    refused = w.admin.client().post(
        "/api/v1/tools/update_ticket/declaration",
        {"effect": "read_only", "reason": "it only reads"},
        format="json",
    )
    assert refused.status_code == 400
    assert "requires_approval" in problem(refused)["errors"]


# --- declarations: admin-only, audited, shown ----------------------------------------------


def test_declarations_are_admin_only_audited_and_shown_on_the_tool(w):
    url = "/api/v1/tools/update_ticket/declaration"
    change = {"effect": "idempotent", "lookup": True, "reason": "the vendor dedupes"}
    for persona in (w.oncall, w.approver, w.agent):
        assert persona.client().post(url, change, format="json").status_code == 403
    assert w.outsider.client().post(url, change, format="json").status_code == 404
    no_reason = w.admin.client().post(url, {"effect": "idempotent"}, format="json")
    assert no_reason.status_code == 400 and "reason" in problem(no_reason)["errors"]
    nothing = w.admin.client().post(url, {"reason": "x"}, format="json")
    assert nothing.status_code == 400
    assert Tool.objects.get(tenant=w.tenant, name="update_ticket").effect == "unsafe"

    done = w.admin.client().post(url, change, format="json")
    assert done.status_code == 200
    tool = done.json()
    assert (tool["effect"], tool["lookup"]) == ("idempotent", True)
    assert tool["declared_by"] == {"kind": "operator", "name": w.admin.username}
    assert tool["declared_at"]
    seen_by_agent = w.agent.client().get("/api/v1/tools/update_ticket").json()
    assert seen_by_agent["lookup"] is True and "base_url" not in seen_by_agent
    same = w.admin.client().post(url, change, format="json")
    assert same.status_code == 409  # nothing would change: nothing is logged
    events = AuditEvent.objects.filter(tenant=w.tenant, verb="tool.declare")
    assert [(e.before, e.after, e.reason) for e in events] == [
        (
            {"effect": "unsafe", "lookup": False},
            {"effect": "idempotent", "lookup": True},
            "the vendor dedupes",
        )
    ]
    # Registration takes the declarations too, and says who made them.
    created = (
        w.admin.client()
        .post(
            "/api/v1/tools",
            {
                "name": "notify",
                "base_url": w.downstream.base("email"),
                "effect": "idempotent",
                "lookup": True,
            },
            format="json",
        )
        .json()
    )
    assert (created["effect"], created["lookup"]) == ("idempotent", True)
    assert created["declared_by"] == {"kind": "operator", "name": w.admin.username}


# --- the replay verdict ------------------------------------------------------------------------


def finish(w, run, tools_called, status="error"):
    response = w.agent.client().post(
        f"/api/v1/runs/{run['id']}/finish",
        {"status": status, "tools_called": tools_called, "error_message": "model timeout"},
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()


def replay(persona, run, **body):
    return persona.client().post(f"/api/v1/runs/{run['id']}/replay", body, format="json")


def test_a_run_that_only_read_replays_without_force(w):
    run = w.start_run()
    read = propose_and_wait(w, run, "search_tickets", "open", {"status": "open"})
    assert read["state"] == "succeeded"
    finished = finish(w, run, ["search_tickets"])
    assert finished["tools_executed"] == ["search_tickets"]  # it was called: the record says so
    verdict = w.agent.client().get(f"/api/v1/runs/{run['id']}").json()["replay_verdict"]
    assert verdict["allowed"] is True
    assert [s["tool"] for s in verdict["safe_tools"]] == ["search_tickets"]
    assert "declared read_only" in verdict["message"]
    assert replay(w.agent, run).status_code == 201


def test_a_run_that_called_idempotent_tools_replays_without_force(w):
    run = w.start_run()
    for _ in range(2):
        t = target("dave") + "@example.com"
        assert propose_and_wait(w, run, "send_email", t, {"s": 1})["state"] == "succeeded"
    propose_and_wait(w, run, "search_tickets", "open", {"status": "open"})
    finish(w, run, ["send_email", "search_tickets"])
    response = replay(w.agent, run)
    assert response.status_code == 201, response.content
    record = w.admin.client().get("/api/v1/replays").json()["results"][0]
    assert record["forced"] is False and record["tools_at_risk"] == []
    assert {s["tool"]: s["effect"] for s in record["safe_tools"]} == {
        "send_email": "idempotent",
        "search_tickets": "read_only",
    }
    event = AuditEvent.objects.get(verb="run.replay", object_id=response.json()["id"])
    assert {s["tool"] for s in event.after["safe_tools"]} == {"send_email", "search_tickets"}


def test_one_unsafe_tool_among_safe_ones_is_the_only_one_named(w):
    run = w.start_run()
    propose_and_wait(w, run, "send_email", target("erin") + "@example.com", {"s": 1})
    propose_and_wait(w, run, "search_tickets", "open", {"status": "open"})
    propose_and_wait(w, run, "update_ticket", target(), {"status": "open"})
    finish(w, run, ["search_tickets", "send_email", "update_ticket"])
    response = replay(w.agent, run)
    assert response.status_code == 409
    body = problem(response)
    assert body["detail"].startswith(
        "Before failing, this run called update_ticket. A replay may repeat them. "
        "An admin can force it with a reason. (Safe to repeat by declaration: "
    )
    assert "search_tickets is declared read_only: it has no side effect" in body["detail"]
    assert "send_email is declared idempotent" in body["detail"]
    assert body["tools_at_risk"] == ["update_ticket"]
    assert [s["tool"] for s in body["safe_tools"]] == ["search_tickets", "send_email"]


def test_an_idempotent_tool_the_gateway_never_saw_stays_at_risk(w):
    """Its calls carried no key Takeover knows of, so its dedupe protects nothing."""
    run = w.start_run()
    finish(w, run, ["send_email", "search_tickets"])
    response = replay(w.agent, run)
    assert response.status_code == 409
    detail = problem(response)["detail"]
    assert detail.startswith("Before failing, this run called send_email. A replay may")
    assert "search_tickets is declared read_only" in detail


def test_all_safe_but_the_runtime_could_not_tell_still_needs_force(w):
    run = w.start_run()
    propose_and_wait(w, run, "search_tickets", "open", {"status": "open"})
    finish(w, run, None)
    response = replay(w.agent, run)
    assert response.status_code == 409
    assert (
        "whether it called any other tool could not be established" in (problem(response)["detail"])
    )
    assert replay(w.admin, run, force=True, reason="reads only").status_code == 201


def test_all_unsafe_keeps_the_exact_sentence(w):
    run = w.start_run()
    propose_and_wait(w, run, "update_ticket", target(), {"status": "open"})
    finish(w, run, ["update_ticket"])
    assert problem(replay(w.agent, run))["detail"] == (
        "Before failing, this run called update_ticket. A replay may repeat them. "
        "An admin can force it with a reason."
    )


def test_the_verdict_follows_the_declaration_in_force(w):
    """A replay sends now, so the declaration that counts is today's: re-declaring the
    outbox unsafe (say, it was caught lying) puts it back at risk."""
    run = w.start_run()
    propose_and_wait(w, run, "send_email", target("f") + "@example.com", {"s": 1})
    finish(w, run, ["send_email"])
    assert w.agent.client().get(f"/api/v1/runs/{run['id']}").json()["replay_verdict"]["allowed"]
    w.admin.client().post(
        "/api/v1/tools/send_email/declaration",
        {"effect": "unsafe", "reason": "it sent duplicates last week"},
        format="json",
    )
    assert problem(replay(w.agent, run))["detail"] == (
        "Before failing, this run called send_email. A replay may repeat them. "
        "An admin can force it with a reason."
    )
