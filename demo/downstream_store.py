"""The demo downstream's authoritative store (`demo/downstream.py`): the records of its three
systems, the keys it saw, the fault rules, and the three tools on `takeover_client.tool`."""

import copy
import math
import threading
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from typing import Any

from takeover_client.tool import (
    EFFECT_FIELDS,
    BadRequest,
    Effect,
    Response,
    Tool,
)

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


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)


def validate_fault(body: dict[str, Any]) -> dict[str, Any]:
    """Turn a ``POST /_control/faults`` body into ``FaultRule`` fields."""
    unknown = sorted(set(body) - FAULT_FIELDS)
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(unknown)}")
    mode = body.get("mode")
    if mode not in FAULT_MODES:
        raise BadRequest(f"mode must be one of: {', '.join(FAULT_MODES)}")
    times = body.get("times", 1)
    if not is_int(times) or times < 1:
        raise BadRequest("times must be an integer >= 1")
    target = body.get("target")
    if target is not None and (not isinstance(target, str) or not target):
        raise BadRequest("target must be a non-empty string")
    prefix = body.get("prefix")
    if prefix is not None and prefix not in PREFIXES:
        raise BadRequest(f"prefix must be one of: {', '.join(PREFIXES)}")
    seconds = body.get("seconds", DEFAULT_SECONDS.get(mode, 0.0))
    if not is_number(seconds) or not 0 <= seconds <= MAX_SECONDS:
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


def require_prefix_target(body: dict[str, Any]) -> tuple[str, str]:
    prefix, target = body.get("prefix"), body.get("target")
    if prefix not in RECORD_PREFIXES:
        raise BadRequest(f"prefix must be one of: {', '.join(RECORD_PREFIXES)}")
    if not isinstance(target, str) or not target:
        raise BadRequest("target must be a non-empty string")
    return prefix, target


def require_state(body: dict[str, Any]) -> dict[str, Any]:
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
