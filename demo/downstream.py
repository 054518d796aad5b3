"""The demo downstream: a small authoritative system that speaks the Takeover tool protocol.

Built on the tool authors' helper, ``takeover_client.tool`` (the protocol's routes, the strict
check of each call) and ``takeover_client.verifier`` (signatures); the HTTP server is the
standard library's, because fault injection needs the socket itself (an RST, a closed port).
Importable without Django configured, so that tests can run it as a subprocess
(``python -m demo.downstream --port 0``) and ``make run`` can start it beside the web process
(``manage.py demo_downstream``).

Three systems live on one port, under path prefixes; a Takeover tool's ``base_url`` names
one. Between them they offer every kind of tool the protocol's optional capabilities describe
(README, "The tool protocol"; issue 13):

``/tickets`` (``unsafe``, no lookup)
    Records ``{"state": {...}, "version": int}`` per target. Applying an effect merges
    ``desired_state`` into the state (creating the ticket if needed) and adds 1 to the version.
    It does **not** deduplicate on ``Idempotency-Key``: it counts keys, so tests can prove that
    Takeover sent an effect once, rather than letting the downstream hide a second send.
    ``GET /tickets/effects/{key}`` answers 501: it keeps no record of keys.
``/email`` (``idempotent``, ``lookup: true``)
    The target is the recipient address. Applying an effect appends an e-mail
    (``desired_state``, typically ``{"subject", "body"}``) to that recipient's outbox; the
    recipient's state is the latest e-mail's fields and its version the number of e-mails.
    The outbox applies one ``Idempotency-Key`` at most once: a repeat of a key it applied is
    answered with the first result (200, that ``{"state", "version"}``) and appends nothing
    (counted in ``deduplicated``), whatever its body says and even if the version moved on.
    ``GET /email/effects/{key}`` (key URL-decoded) answers 200 ``{"applied": true, "state",
    "version", "target"}`` with that first result, or 404 when it never applied the key.
    Keys are remembered per prefix, not per tenant: one demo outbox serves every tenant of a
    test session, whose keys are distinct anyway.
``/search`` (``read_only``)
    The ticket search: ``POST /search/effects`` answers 200 ``{"state": {"matches": [ids],
    "count": n}, "version": 0}``, the tickets whose state has every field of
    ``desired_state`` (the target only labels the search). It changes nothing (counted in
    ``searches``). ``GET /search/state/{target}`` answers 200 ``{"state": {}, "version": 0}``.

Both answer the tool protocol (docs/design.md, "The tool protocol"):

- ``POST {prefix}/effects`` with headers ``Idempotency-Key`` and ``X-Takeover-Action`` and the
  body ``{"action_id", "tenant", "principal", "tool", "target", "desired_state",
  "expected_version"}``. When ``expected_version`` is not null and differs from the current
  version (a missing record has version 0), the answer is 409 ``{"error": "version_conflict",
  "version": current}`` and nothing changes. Otherwise 200 ``{"state", "version"}``. Anything
  malformed is a 400 and changes nothing; validation is strict on purpose, to catch a
  dispatcher's bugs: all seven fields, both headers, and ``X-Takeover-Action`` equal to
  ``action_id``.
- ``GET {prefix}/state/{target}`` (target URL-decoded): 200 ``{"state", "version"}`` or 404
  ``{"error": "not_found"}``. It never changes a record (it is only counted in the stats).

Signed calls (``takeover_client.signing``). Every tool call's ``Takeover-Signature`` is
checked against the secrets given to ``POST /_control/secrets`` and counted in the stats
(``signatures``: ``valid``, ``missing``, ``invalid``). Refusing is off by default; with
``--require-signature`` or ``POST /_control/require-signature {"require": true}``, a call that
is unsigned, tampered, signed with an unknown secret or older than 5 minutes is answered 401
``{"error": "signature_refused", "detail": ...}``, changes nothing, is counted in ``refused``
and logged on one line (even with ``--quiet``)::

    refused an unsigned call: POST /tickets/effects (no Takeover-Signature)

The signature covers the raw path as received (``/email/effects/%2E%2E``), so a key or target
reaches the check exactly as Takeover sent it. The ``_control`` endpoints are never signed
(this is a demo).

Fault injection, for tests and the demo. ``POST /_control/faults`` pushes a rule
``{"mode", "times" (default 1), "target", "prefix", "seconds"}``; each effect request that a
rule matches (same prefix and target, when the rule names them) consumes one of its ``times``,
oldest rule first. The modes:

``drop_after_commit``
    Apply the effect, then close the connection without a byte of response, with an RST
    (``SO_LINGER`` 0). httpx raises ``ReadError`` (or ``RemoteProtocolError``).
``error_after_commit``
    Apply the effect, then answer 500.
``slow_after_commit``
    Apply the effect, then sleep ``seconds`` (default 30) before answering 200, so that a
    client with a shorter timeout sees ``ReadTimeout``.
``reject``
    Answer 422 without applying anything.
``error_before_commit``
    Answer 503 without applying anything. (To Takeover this is still *unknown*: a 503 does
    not prove that nothing happened, which is exactly what makes it a good test.)
``error_on_read``
    Not an effect fault: a matching ``GET {prefix}/state/{target}`` answers 503, so that
    reconciliation's read can be made to fail a given number of ``times``.
``refuse``
    Immediate, not queued: close the listening socket for ``seconds`` (default 1.5), so that
    new connections get ECONNREFUSED (httpx ``ConnectError``), then listen again on the same
    port. The control request gets its 200 after the socket is closed, so a request made after
    that answer is refused. Idle keep-alive connections are closed at the same time, so that a
    pooled client cannot slip a request through; requests already being handled finish.

The ``*_after_commit`` modes run the normal apply step first, which may itself answer 409
(nothing changes) or, in the outbox, be a deduplicated repeat (nothing changes either); the
fault then replaces whatever the answer would have been. Faults never touch lookups.

The rest of the control API (all JSON, all at the root of the port):

- ``GET /_control/faults`` lists the pending rules; ``DELETE /_control/faults`` clears them.
- ``GET /_control/stats``: ``effects_received`` (POST /effects requests seen per
  ``Idempotency-Key``, malformed ones included, ``""`` for none), ``mutations`` (applied, per
  prefix and target) and ``total_mutations``, ``external_writes`` (a total) and
  ``external_writes_by_target``, ``state_reads`` (a total) and ``state_reads_by_target``,
  ``faults_fired`` (per mode), ``deduplicated`` (repeats the outbox answered with the first
  result, per key), ``lookups`` (per prefix and key), ``searches`` (per target),
  ``signatures`` (tool calls per verdict), ``refused``, ``require_signature`` and ``secrets``
  (how many are held).
- ``GET /_control/records``: every record (e-mail recipients with their outbox).
- ``GET /_control/requests``: the last 1000 effect requests, with headers, body, outcome and
  the signature's verdict.
- ``POST /_control/external-write`` ``{"prefix", "target", "state"}``: another actor changes a
  record (tickets: merge; email: one more e-mail); version + 1. Not one of our mutations.
  (``prefix`` is ``tickets`` or ``email`` here and in ``seed``: the search holds no records.)
- ``POST /_control/seed`` ``{"prefix", "target", "state", "version" (default 1)}``: set a
  record directly (an e-mail recipient gets an empty outbox: the seeded version counts e-mails
  that the demo never saw).
- ``POST /_control/reset``: forget records, remembered keys, stats, rules and the request log
  (not the secrets, nor whether signatures are required: those are configuration).
- ``POST /_control/secrets`` ``{"secret"}``: accept calls signed with this secret too (any
  tool, any prefix: Takeover gives each registered tool its own); answers how many it holds.
- ``POST /_control/require-signature`` ``{"require": true|false}``: switch refusing on or off.

Known quirks:

- ``refuse`` reopens the port with ``SO_REUSEADDR``; if another process takes the port during
  the window (unlikely, but possible with an ephemeral port from ``--port 0``), the server keeps
  retrying and logs it. Control requests cannot reach a refusing server: wait it out.
- A request that arrives on a keep-alive connection in the instant ``refuse`` closes it may be
  cut off after it was sent, as with a real crash.
- It needs the standard library and ``takeover_client`` (``pip install ./client``):
  ``python -m demo.downstream --port 0``, or the file itself, ``python demo/downstream.py``.
- One log line per request goes to stderr; a parent that pipes stderr must read it (or pass
  ``--quiet``), or the server blocks once the pipe is full.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from takeover_client.tool import (
    EFFECT_FIELDS,
    BadRequest,
    Effect,
    Response,
    Tool,
    parse_json_object,
)
from takeover_client.verifier import Verifier

PREFIXES = ("tickets", "email", "search")
RECORD_PREFIXES = ("tickets", "email")  # "search" only reads the tickets
# The outbox is `idempotent` with `lookup`: it applies one Idempotency-Key at most once,
# answers a repeat with the first result, and answers GET /email/effects/{key}.
DEDUPLICATING = ("email",)

QUEUED_MODES = (
    "drop_after_commit",
    "error_after_commit",
    "slow_after_commit",
    "reject",
    "error_before_commit",
    "error_on_read",
)
FAULT_MODES = (*QUEUED_MODES, "refuse")
DEFAULT_SECONDS = {"slow_after_commit": 30.0, "refuse": 1.5}
MAX_SECONDS = 3600.0
FAULT_FIELDS = frozenset({"mode", "times", "target", "prefix", "seconds"})

MAX_BODY_BYTES = 1 << 20
REQUEST_LOG_SIZE = 1000
IDLE_TIMEOUT_SECONDS = 120
RELISTEN_LOG_AFTER_SECONDS = 2.0


# --- the authoritative store -------------------------------------------------------------


@dataclass
class Record:
    state: dict[str, Any]
    version: int
    outbox: list[dict[str, Any]] = field(default_factory=list)  # e-mail recipients only

    def as_json(self, *, outbox: bool = False) -> dict[str, Any]:
        body = {"state": copy.deepcopy(self.state), "version": self.version}
        if outbox:
            body["outbox"] = copy.deepcopy(self.outbox)
        return body


@dataclass
class FaultRule:
    id: int
    mode: str
    times: int
    seconds: float
    target: str | None = None
    prefix: str | None = None

    def matches(self, prefix: str, target: str, *, read: bool) -> bool:
        return (
            (self.mode == "error_on_read") == read
            and self.prefix in (None, prefix)
            and self.target in (None, target)
        )


@dataclass
class Outcome:
    """What the store decided for one request; the handler turns it into bytes on the wire."""

    status: int
    body: dict[str, Any]
    fault: FaultRule | None = None


class Store:
    """Records, fault rules and statistics, behind one lock.

    The lock is held only for in-memory bookkeeping, never across a sleep or a socket write,
    so a ``slow_after_commit`` request does not stall the rest of the server.
    """

    def __init__(self, *, require_signature: bool = False) -> None:
        self._lock = threading.Lock()
        # Configuration, not state: `reset` keeps the secrets and the switch.
        self._secrets: list[str] = []
        self.require_signature = require_signature
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._records: dict[str, dict[str, Record]] = {p: {} for p in PREFIXES}
        self._rules: list[FaultRule] = []
        self._next_rule_id = 1
        self._effects_received: Counter[str] = Counter()
        self._mutations: dict[str, Counter[str]] = {p: Counter() for p in PREFIXES}
        self._external_writes: dict[str, Counter[str]] = {p: Counter() for p in PREFIXES}
        self._state_reads: dict[str, Counter[str]] = {p: Counter() for p in PREFIXES}
        self._faults_fired: Counter[str] = Counter()
        # Per deduplicating prefix: key → the first result (status, body, target).
        self._applied_keys: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in PREFIXES}
        self._deduplicated: Counter[str] = Counter()
        self._lookups: dict[str, Counter[str]] = {p: Counter() for p in PREFIXES}
        self._searches: Counter[str] = Counter()
        self._requests: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG_SIZE)
        self._request_seq = 0
        self._signatures: Counter[str] = Counter()  # valid / missing / invalid, tool calls only
        self._refused = 0

    def reset(self) -> None:
        with self._lock:
            self._clear()

    # The tool protocol.

    def effect(
        self,
        prefix: str,
        idempotency_key: str | None,
        action_header: str | None,
        payload: dict[str, Any] | None,
        problem: str | None,
        traceparent: str | None = None,
        signature: str | None = None,
    ) -> Outcome:
        """Count one ``POST {prefix}/effects`` and, unless it is malformed or faulted, apply it."""
        with self._lock:
            self._effects_received[idempotency_key or ""] += 1
            applied = False
            if problem is not None:
                outcome = Outcome(400, {"error": "bad_request", "detail": problem})
            else:
                assert payload is not None
                target = payload["target"]
                fault = self._take_rule(prefix, target, read=False)
                if fault is not None and fault.mode == "reject":
                    outcome = Outcome(422, {"error": "rejected", "detail": "injected fault"}, fault)
                elif fault is not None and fault.mode == "error_before_commit":
                    outcome = Outcome(
                        503, {"error": "unavailable", "detail": "injected fault"}, fault
                    )
                elif prefix == "search":
                    outcome = Outcome(200, self._search(target, payload["desired_state"]), fault)
                elif prefix in DEDUPLICATING and idempotency_key in self._applied_keys[prefix]:
                    # A repeat of a key already applied: the first result, nothing applied.
                    first = self._applied_keys[prefix][idempotency_key]
                    self._deduplicated[idempotency_key] += 1
                    outcome = Outcome(first["status"], copy.deepcopy(first["body"]), fault)
                else:
                    current = self._records[prefix].get(target)
                    version = current.version if current else 0
                    expected = payload["expected_version"]
                    if expected is not None and expected != version:
                        body = {"error": "version_conflict", "version": version}
                        outcome = Outcome(409, body, fault)
                    else:
                        record = self._apply(
                            prefix,
                            target,
                            payload["desired_state"],
                            external=False,
                            idempotency_key=idempotency_key,
                            action_id=payload["action_id"],
                        )
                        self._mutations[prefix][target] += 1
                        applied = True
                        outcome = Outcome(200, record.as_json(), fault)
                        if prefix in DEDUPLICATING:
                            self._applied_keys[prefix][idempotency_key] = {
                                "status": 200,
                                "body": record.as_json(),
                                "target": target,
                            }
            self._request_seq += 1
            self._requests.append(
                {
                    "seq": self._request_seq,
                    "at": time.time(),
                    "prefix": prefix,
                    "idempotency_key": idempotency_key,
                    "action_header": action_header,
                    "traceparent": traceparent,
                    "signature": signature,
                    "body": copy.deepcopy(payload),
                    "status": outcome.status,
                    "applied": applied,
                    "fault": outcome.fault.mode if outcome.fault else None,
                }
            )
            return outcome

    def lookup(self, prefix: str, key: str) -> Outcome:
        """``GET {prefix}/effects/{key}``: did this system apply that key? Only the outbox
        keeps a record of keys; the ticket system cannot tell (501)."""
        with self._lock:
            self._lookups[prefix][key] += 1
            if prefix not in DEDUPLICATING:
                return Outcome(
                    501, {"error": "not_implemented", "detail": "no record of keys is kept here"}
                )
            first = self._applied_keys[prefix].get(key)
            if first is None:
                return Outcome(404, {"error": "not_found", "detail": "never received this key"})
            body = first["body"]
            return Outcome(
                200,
                {
                    "applied": True,
                    "state": copy.deepcopy(body["state"]),
                    "version": body["version"],
                    "target": first["target"],
                },
            )

    def _search(self, target: str, query: dict[str, Any]) -> dict[str, Any]:
        """The read-only ticket search: tickets whose state has every field of ``query``."""
        self._searches[target] += 1
        matches = sorted(
            name
            for name, record in self._records["tickets"].items()
            if all(record.state.get(k) == v for k, v in query.items())
        )
        return {"state": {"matches": matches, "count": len(matches)}, "version": 0}

    def read_state(self, prefix: str, target: str) -> Outcome:
        with self._lock:
            self._state_reads[prefix][target] += 1
            fault = self._take_rule(prefix, target, read=True)
            if fault is not None:
                return Outcome(503, {"error": "unavailable", "detail": "injected fault"}, fault)
            if prefix == "search":  # a search changes nothing; there is no record to read
                return Outcome(200, {"state": {}, "version": 0})
            record = self._records[prefix].get(target)
            if record is None:
                return Outcome(404, {"error": "not_found"})
            return Outcome(200, record.as_json())

    def _apply(
        self,
        prefix: str,
        target: str,
        fields: dict[str, Any],
        *,
        external: bool,
        idempotency_key: str | None = None,
        action_id: str | None = None,
    ) -> Record:
        record = self._records[prefix].setdefault(target, Record(state={}, version=0))
        record.version += 1
        if prefix == "tickets":
            record.state.update(copy.deepcopy(fields))
        else:
            record.state = copy.deepcopy(fields)
            record.outbox.append(
                {
                    "version": record.version,
                    "email": copy.deepcopy(fields),
                    "external": external,
                    "idempotency_key": idempotency_key,
                    "action_id": action_id,
                }
            )
        return record

    # Control.

    def _take_rule(self, prefix: str, target: str, *, read: bool) -> FaultRule | None:
        for rule in self._rules:
            if rule.matches(prefix, target, read=read):
                rule.times -= 1
                if rule.times <= 0:
                    self._rules.remove(rule)
                self._faults_fired[rule.mode] += 1
                return copy.copy(rule)
        return None

    def add_rule(self, spec: dict[str, Any]) -> FaultRule:
        with self._lock:
            rule = FaultRule(id=self._next_rule_id, **spec)
            self._next_rule_id += 1
            self._rules.append(rule)
            return copy.copy(rule)

    # Signatures.

    def secrets(self) -> list[str]:
        with self._lock:
            return list(self._secrets)

    def add_secret(self, secret: str) -> int:
        with self._lock:
            if secret not in self._secrets:
                self._secrets.append(secret)
            return len(self._secrets)

    def note_signature(self, verdict: str, *, refused: bool) -> None:
        with self._lock:
            self._signatures[verdict] += 1
            self._refused += refused

    def note_refuse(self) -> None:
        with self._lock:
            self._faults_fired["refuse"] += 1

    def rules(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(rule) for rule in self._rules]

    def clear_rules(self) -> int:
        with self._lock:
            cleared = len(self._rules)
            self._rules.clear()
            return cleared

    def external_write(self, prefix: str, target: str, state: dict[str, Any]) -> Record:
        with self._lock:
            self._external_writes[prefix][target] += 1
            return copy.deepcopy(self._apply(prefix, target, state, external=True))

    def seed(self, prefix: str, target: str, state: dict[str, Any], version: int) -> Record:
        with self._lock:
            record = Record(state=copy.deepcopy(state), version=version)
            self._records[prefix][target] = record
            return copy.deepcopy(record)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "effects_received": dict(self._effects_received),
                "mutations": {p: dict(c) for p, c in self._mutations.items()},
                "total_mutations": sum(c.total() for c in self._mutations.values()),
                "external_writes": sum(c.total() for c in self._external_writes.values()),
                "external_writes_by_target": {p: dict(c) for p, c in self._external_writes.items()},
                "state_reads": sum(c.total() for c in self._state_reads.values()),
                "state_reads_by_target": {p: dict(c) for p, c in self._state_reads.items()},
                "faults_fired": dict(self._faults_fired),
                "deduplicated": dict(self._deduplicated),
                "lookups": {p: dict(c) for p, c in self._lookups.items()},
                "searches": dict(self._searches),
                "signatures": {
                    "valid": self._signatures["valid"],
                    "missing": self._signatures["missing"],
                    "invalid": self._signatures["invalid"],
                },
                "refused": self._refused,
                "require_signature": self.require_signature,
                "secrets": len(self._secrets),
            }

    def records(self) -> dict[str, Any]:
        with self._lock:
            return {
                prefix: {
                    target: record.as_json(outbox=prefix == "email")
                    for target, record in records.items()
                }
                for prefix, records in self._records.items()
            }

    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(list(self._requests))


# --- validation ----------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def validate_fault(body: dict[str, Any]) -> dict[str, Any]:
    """Turn a ``POST /_control/faults`` body into ``FaultRule`` fields."""
    unknown = sorted(set(body) - FAULT_FIELDS)
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(unknown)}")
    mode = body.get("mode")
    if mode not in FAULT_MODES:
        raise BadRequest(f"mode must be one of: {', '.join(FAULT_MODES)}")
    times = body.get("times", 1)
    if not _is_int(times) or times < 1:
        raise BadRequest("times must be an integer >= 1")
    target = body.get("target")
    if target is not None and (not isinstance(target, str) or not target):
        raise BadRequest("target must be a non-empty string")
    prefix = body.get("prefix")
    if prefix is not None and prefix not in PREFIXES:
        raise BadRequest(f"prefix must be one of: {', '.join(PREFIXES)}")
    seconds = body.get("seconds", DEFAULT_SECONDS.get(mode, 0.0))
    if not _is_number(seconds) or not 0 <= seconds <= MAX_SECONDS:
        raise BadRequest(f"seconds must be a number between 0 and {MAX_SECONDS:g}")
    if mode == "refuse" and (target is not None or prefix is not None):
        raise BadRequest("refuse closes the whole port; it takes no target or prefix")
    return {
        "mode": mode,
        "times": times,
        "seconds": float(seconds),
        "target": target,
        "prefix": prefix,
    }


def _require_prefix_target(body: dict[str, Any]) -> tuple[str, str]:
    prefix, target = body.get("prefix"), body.get("target")
    if prefix not in RECORD_PREFIXES:
        raise BadRequest(f"prefix must be one of: {', '.join(RECORD_PREFIXES)}")
    if not isinstance(target, str) or not target:
        raise BadRequest("target must be a non-empty string")
    return prefix, target


def _require_state(body: dict[str, Any]) -> dict[str, Any]:
    state = body.get("state")
    if not isinstance(state, dict):
        raise BadRequest("state must be an object")
    return state


# --- the three tools, on takeover_client.tool ----------------------------------------------


def make_tools(store: Store) -> dict[str, Tool]:
    """One `Tool` per prefix, answering from the store. The helper checks each call against
    the protocol (a malformed one never reaches the store's apply); the store decides the
    answer and any injected fault, which `apply` leaves in `effect.notes` for the handler to
    act out on the wire (a dropped connection is no answer a tool function can return)."""
    tools = {}
    for prefix in PREFIXES:
        tool = Tool()

        def apply(effect: Effect, prefix: str = prefix) -> Response:
            payload = {name: getattr(effect, name) for name in EFFECT_FIELDS}
            outcome = store.effect(
                prefix,
                effect.key,
                effect.action_id,
                payload,
                None,
                effect.notes.get("traceparent"),
                effect.notes.get("signature"),
            )
            effect.notes["fault"] = outcome.fault
            return Response(outcome.status, outcome.body)

        def state(target: str, prefix: str = prefix) -> Response:
            outcome = store.read_state(prefix, target)
            fault = {"X-Demo-Fault": outcome.fault.mode} if outcome.fault else {}
            return Response(outcome.status, outcome.body, fault)

        def lookup(key: str, prefix: str = prefix) -> Response:
            outcome = store.lookup(prefix, key)
            return Response(outcome.status, outcome.body)

        tool.apply(apply)
        tool.state(state)
        tool.lookup(lookup)
        tools[prefix] = tool
    return tools


# --- HTTP ----------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    """One connection; HTTP/1.1 keep-alive, every answer with a Content-Length."""

    protocol_version = "HTTP/1.1"
    server_version = "TakeoverDemoDownstream/1.0"
    # Idle keep-alive connections are dropped after this; it does not limit a slow answer.
    timeout = IDLE_TIMEOUT_SECONDS
    server: DemoDownstreamServer

    def setup(self) -> None:
        super().setup()
        self.busy = False
        self.started = time.monotonic()
        self.server.track(self)

    def finish(self) -> None:
        self.server.untrack(self)
        super().finish()

    def handle_one_request(self) -> None:
        self.busy = False
        super().handle_one_request()
        self.busy = False

    def parse_request(self) -> bool:
        # The request line has been read: from here on the connection is not idle, and a
        # `refuse` must not cut it off.
        self.busy = True
        self.started = time.monotonic()
        return super().parse_request()

    # Routing.

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        self.note = ""
        try:
            raw = self._read_body()
        except BadRequest as exc:
            # The unread body would be taken for the next request: close the connection.
            self._send_json(400, {"error": "bad_request", "detail": str(exc)}, close=True)
            return
        path = urlsplit(self.path).path
        parts = path.split("/", 2)  # "", first, rest
        first = parts[1] if len(parts) > 1 else ""
        try:
            if first in PREFIXES:
                relative = "/" + (parts[2] if len(parts) > 2 else "")
                self._tool_call(method, path, first, relative, raw)
            elif first == "_control" and len(parts) == 3 and "/" not in parts[2]:
                self._control(method, parts[2], raw)
            else:
                self._send_json(404, {"error": "not_found"})
        except BadRequest as exc:
            self._send_json(400, {"error": "bad_request", "detail": str(exc)})
        except _MethodNotAllowed as exc:
            self._send_json(
                405, {"error": "method_not_allowed"}, headers={"Allow": ", ".join(exc.allowed)}
            )

    def _allow(self, method: str, *allowed: str) -> None:
        if method not in allowed:
            raise _MethodNotAllowed(allowed)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise BadRequest("chunked bodies are not supported; send a Content-Length")
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            size = int(length)
        except ValueError:
            raise BadRequest("invalid Content-Length") from None
        if not 0 <= size <= MAX_BODY_BYTES:
            raise BadRequest(f"body must be at most {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(size)
        if len(raw) != size:
            raise ConnectionError("client closed the connection mid-body")
        return raw

    # The tool protocol, spoken by `takeover_client.tool`.

    def _tool_call(self, method: str, raw_path: str, prefix: str, relative: str, raw: bytes):
        """One call of a tool: its signature checked (refused when required), then answered by
        the prefix's `Tool`, faults acted out on the wire."""
        headers = dict(self.headers.items())
        signature = self._check_signature(method, raw_path, raw, headers)
        if signature is None:
            return
        notes: dict[str, Any] = {"signature": signature, "traceparent": headers.get("traceparent")}
        response = self.server.tools[prefix].handle(
            method, unquote(relative), headers, raw, notes=notes
        )
        if relative == "/effects" and method == "POST":
            self._after_effect(prefix, headers, raw, response, notes)
            return
        if fault := response.headers.pop("X-Demo-Fault", None):
            self.note = f" fault={fault}"
        self._send_json(response.status, response.body, headers=response.headers)

    def _check_signature(self, method: str, raw_path: str, raw: bytes, headers) -> str | None:
        """ "valid", "missing" or "invalid"; None when the call was refused (and answered)."""
        store = self.server.store
        refusal = Verifier(store.secrets).refusal(
            method=method, path=raw_path, body=raw, headers=headers
        )
        verdict = "valid" if refusal is None else refusal.verdict
        refused = refusal is not None and store.require_signature
        store.note_signature(verdict, refused=refused)
        if not refused:
            return verdict
        # Always logged, even with --quiet: a direct call to a tool is worth seeing.
        self.server.log(refusal.line(method, raw_path), always=True)
        self.note = " refused"
        self._send_json(
            401, json.loads(refusal.body()), headers={"WWW-Authenticate": "Takeover-Signature"}
        )
        return None

    def _after_effect(self, prefix: str, headers, raw: bytes, response: Response, notes) -> None:
        key = headers.get("Idempotency-Key")
        self.note = f" key={key}"
        if response.status == 400:
            # Malformed: the helper refused it before `apply`; counted and logged all the same.
            try:
                payload = parse_json_object(raw)
            except BadRequest:
                payload = None
            self.server.store.effect(
                prefix,
                key,
                headers.get("X-Takeover-Action"),
                payload,
                response.body.get("detail", "method not allowed"),
                headers.get("traceparent"),
                notes["signature"],
            )
        fault = notes.get("fault")
        if fault is not None:
            self.note += f" fault={fault.mode}"
        if fault is None or fault.mode in ("reject", "error_before_commit"):
            self._send_json(response.status, response.body, headers=response.headers)
        elif fault.mode == "drop_after_commit":
            self._drop_connection()
        elif fault.mode == "error_after_commit":
            self._send_json(500, {"error": "internal_error", "detail": "injected fault"})
        elif fault.mode == "slow_after_commit":
            # Wakes early on shutdown, so SIGTERM is not held up by a sleeping request.
            self.server.stopping.wait(fault.seconds)
            self._send_json(response.status, response.body)
        else:  # pragma: no cover - every mode is handled above
            raise AssertionError(fault.mode)

    # Control.

    def _control(self, method: str, name: str, raw: bytes) -> None:
        store = self.server.store
        if name == "faults":
            self._allow(method, "GET", "POST", "DELETE")
            if method == "GET":
                self._send_json(200, {"faults": store.rules()})
            elif method == "DELETE":
                self._send_json(200, {"cleared": store.clear_rules()})
            else:
                spec = validate_fault(parse_json_object(raw))
                if spec["mode"] == "refuse":
                    self._refuse(spec["seconds"])
                else:
                    rule = store.add_rule(spec)
                    self.note = f" +{rule.mode}x{rule.times}"
                    self._send_json(200, {"fault": asdict(rule)})
        elif name == "stats":
            self._allow(method, "GET")
            self._send_json(200, store.stats())
        elif name == "records":
            self._allow(method, "GET")
            self._send_json(200, store.records())
        elif name == "requests":
            self._allow(method, "GET")
            self._send_json(200, {"requests": store.requests()})
        elif name == "external-write":
            self._allow(method, "POST")
            body = parse_json_object(raw)
            prefix, target = _require_prefix_target(body)
            record = store.external_write(prefix, target, _require_state(body))
            self._send_json(200, record.as_json())
        elif name == "seed":
            self._allow(method, "POST")
            body = parse_json_object(raw)
            prefix, target = _require_prefix_target(body)
            state = _require_state(body)
            version = body.get("version", 1)
            if not _is_int(version) or version < 1:
                raise BadRequest("version must be an integer >= 1")
            self._send_json(200, store.seed(prefix, target, state, version).as_json())
        elif name == "reset":
            self._allow(method, "POST")
            store.reset()
            self._send_json(200, {"reset": True})
        elif name == "secrets":
            self._allow(method, "POST")
            secret = parse_json_object(raw).get("secret")
            if not isinstance(secret, str) or not secret:
                raise BadRequest("secret must be a non-empty string")
            self._send_json(200, {"secrets": store.add_secret(secret)})
        elif name == "require-signature":
            self._allow(method, "POST")
            require = parse_json_object(raw).get("require")
            if not isinstance(require, bool):
                raise BadRequest("require must be true or false")
            store.require_signature = require
            self.server.log(f"signatures {'required' if require else 'not required'}")
            self._send_json(200, {"require": require})
        else:
            self._send_json(404, {"error": "not_found"})

    def _refuse(self, seconds: float) -> None:
        self.server.store.note_refuse()
        # Only answer once the listening socket is closed: a client that sends its next
        # request after this answer must be refused, not queued in the accept backlog.
        closed = self.server.refuse_connections(seconds)
        self.note = f" refuse {seconds:g}s"
        body = {"fault": {"mode": "refuse", "seconds": seconds}, "refusing": closed}
        # Connection: close, or the client would reuse this connection through the window.
        self._send_json(200, body, close=True)

    # Output.

    def _send_json(
        self,
        status: int,
        body: dict[str, Any],
        *,
        close: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if close:
                self.send_header("Connection", "close")  # also sets close_connection
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self.wfile.flush()
        except OSError as exc:  # the client gave up, e.g. after its read timeout
            self.close_connection = True
            self._log(f"{status} not delivered ({exc.__class__.__name__})")
            return
        self._log(str(status))

    def _drop_connection(self) -> None:
        """Close without a response; SO_LINGER 0 makes it an RST rather than a FIN."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # The descriptor is released when finish() closes rfile; shutdown_request() then
        # finds the socket closed, so no FIN goes out before the RST.
        self.connection.close()
        self._log("dropped")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The stdlib's own errors (bad request line, unsupported method): JSON like ours.
        self.note = ""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        error = phrase.lower().replace(" ", "_").replace("-", "_")
        # Connection: close, as the stdlib does: after a garbled request, the stream is suspect.
        self._send_json(code, {"error": error, "detail": message or phrase}, close=True)

    def _log(self, result: str) -> None:
        elapsed = (time.monotonic() - self.started) * 1000
        method = getattr(self, "command", None) or "-"
        path = getattr(self, "path", None) or "-"
        note = getattr(self, "note", "")
        self.server.log(f"{method} {path} {result}{note} {elapsed:.0f}ms")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _log writes one line per request instead

    def log_message(self, format: str, *args: Any) -> None:
        self.server.log(format % args)


class _MethodNotAllowed(Exception):
    def __init__(self, allowed: tuple[str, ...]) -> None:
        super().__init__(allowed)
        self.allowed = allowed


class DemoDownstreamServer(ThreadingHTTPServer):
    """A thread per connection, plus a ``refuse`` switch that closes and reopens the port.

    ``serve_until_stopped()`` replaces ``serve_forever()``: the listening socket is closed and
    reopened by the serving thread itself, so it is never closed under a ``select()`` that is
    waiting on it.
    """

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8100,
        *,
        quiet: bool = False,
        require_signature: bool = False,
    ) -> None:
        super().__init__((host, port), Handler)
        self.store = Store(require_signature=require_signature)
        self.tools = make_tools(self.store)
        self.quiet = quiet
        self.stopping = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._refuse_lock = threading.Lock()
        self._refuse_requests: list[tuple[float, threading.Event]] = []
        self._handlers_lock = threading.Lock()
        self._handlers: set[Handler] = set()

    def server_bind(self) -> None:
        # HTTPServer.server_bind() would call socket.getfqdn(), a possible DNS lookup.
        TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    @property
    def url(self) -> str:
        host = self.server_name
        return (
            f"http://[{host}]:{self.server_port}"
            if ":" in host
            else f"http://{host}:{self.server_port}"
        )

    def log(self, line: str, *, always: bool = False) -> None:
        if always or not self.quiet:
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} demo-downstream {line}\n")
            sys.stderr.flush()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # reset, broken pipe, timeout: the client's business
            self.log(f"connection from {client_address[0]}: {exc.__class__.__name__}")
        else:
            super().handle_error(request, client_address)

    # Connections, so that `refuse` can close the idle keep-alive ones.

    def track(self, handler: Handler) -> None:
        with self._handlers_lock:
            self._handlers.add(handler)

    def untrack(self, handler: Handler) -> None:
        with self._handlers_lock:
            self._handlers.discard(handler)

    def _close_idle_connections(self) -> None:
        with self._handlers_lock:
            idle = [h for h in self._handlers if not h.busy]
        for handler in idle:
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)

    # The serving loop.

    def serve_until_stopped(self) -> None:
        while not self.stopping.is_set():
            seconds, waiters = self._take_refuse_requests()
            if waiters:
                self._refuse_for(seconds, waiters)
                continue
            readable, _, _ = select.select([self.socket, self._wake_r], [], [], 0.5)
            if self._wake_r in readable:
                self._drain_wake()
            if self.socket in readable and not self.stopping.is_set():
                self._handle_request_noblock()

    def stop(self) -> None:
        """Ask ``serve_until_stopped()`` to return; safe from any thread or a signal handler."""
        self.stopping.set()
        self._wake()

    def refuse_connections(self, seconds: float) -> bool:
        """Close the listening socket for ``seconds``; return once it is closed."""
        done = threading.Event()
        with self._refuse_lock:
            self._refuse_requests.append((seconds, done))
        self._wake()
        return done.wait(5)

    def server_close(self) -> None:
        super().server_close()
        self._wake_r.close()
        self._wake_w.close()

    def _refuse_for(self, seconds: float, waiters: list[threading.Event]) -> None:
        deadline = time.monotonic() + seconds
        self.socket.close()
        self._close_idle_connections()
        self.log(f"refusing connections for {seconds:g}s")
        while True:
            for waiter in waiters:
                waiter.set()
            more, waiters = self._take_refuse_requests()
            if waiters:
                deadline = max(deadline, time.monotonic() + more)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.stopping.is_set():
                break
            select.select([self._wake_r], [], [], remaining)
            self._drain_wake()
        if not self.stopping.is_set():
            self._listen_again()

    def _listen_again(self) -> None:
        first_try = time.monotonic()
        logged = False
        while not self.stopping.is_set():
            self.socket = socket.socket(self.address_family, self.socket_type)
            try:
                self.server_bind()
                self.server_activate()
            except OSError as exc:
                self.socket.close()
                if not logged and time.monotonic() - first_try > RELISTEN_LOG_AFTER_SECONDS:
                    self.log(f"cannot listen on {self.url} again yet: {exc}; retrying")
                    logged = True
                self.stopping.wait(0.05)
                continue
            self.log(f"listening again on {self.url}")
            return

    def _take_refuse_requests(self) -> tuple[float, list[threading.Event]]:
        with self._refuse_lock:
            requests, self._refuse_requests = self._refuse_requests, []
        return max((s for s, _ in requests), default=0.0), [done for _, done in requests]

    def _wake(self) -> None:
        # OSError: the buffer is full (already awake) or the socket closed (already stopped).
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except OSError:
            pass


def serve(
    host: str = "127.0.0.1",
    port: int = 8100,
    *,
    quiet: bool = False,
    require_signature: bool = False,
) -> None:
    """Run the demo downstream until SIGTERM or SIGINT.

    Prints ``demo downstream listening on http://HOST:PORT`` to stdout once the port is open;
    with ``port=0`` the line carries the port the system chose.
    """
    server = DemoDownstreamServer(host, port, quiet=quiet, require_signature=require_signature)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: server.stop())
    try:
        print(f"demo downstream listening on {server.url}", flush=True)
        server.serve_until_stopped()
    finally:
        server.server_close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        server.log("stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m demo.downstream",
        description="Demo downstream speaking the Takeover tool protocol, with fault injection.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8100, help="port to bind; 0 picks a free one (default 8100)"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-request log lines")
    parser.add_argument(
        "--require-signature",
        action="store_true",
        help="refuse tool calls without a valid Takeover-Signature (POST /_control/secrets)",
    )
    args = parser.parse_args(argv)
    serve(args.host, args.port, quiet=args.quiet, require_signature=args.require_signature)


if __name__ == "__main__":
    main()
