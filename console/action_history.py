"""What happened to one action, for its page: attempts, reads and audit events as one
timeline, and the diff between the desired state and the last read."""

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q

from console.templatetags.console_format import age_label, compact_json
from core.audit import Verb
from core.models import AuditEvent
from runs.models import Action
from runs.states import (
    VERDICT_MEANING,
)

# --- one action ----------------------------------------------------------------------------


@dataclass
class TimelineEntry:
    at: datetime
    kind: str  # audit | attempt | read
    title: str
    actor: str = ""
    detail: str = ""
    tone: str = ""  # good | bad | warn | info | ""
    lines: list = field(default_factory=list)


# What each verb means to a person is declared once, with the verb (core.audit.Verb).
VERB_TITLES = {verb.value: verb.label for verb in Verb}
VERB_TONES = {
    "action.succeeded": "good",
    "action.failed": "bad",
    "action.unknown": "warn",
    "action.needs_human": "bad",
    "action.blocked": "bad",
    "approval_request.deny": "bad",
    "approval_request.expire": "warn",
    "approval.revoke": "warn",
    "approval.grant": "good",
    "approval.consume": "info",
}
OUTCOME_TONES = {
    "applied": "good",
    "version_conflict": "bad",
    "rejected": "bad",
    "not_sent": "warn",
    "unknown": "warn",
}
VERDICT_TONES = {
    "match": "good",
    "mismatch": "bad",
    "moved_on": "warn",
    "missing": "bad",
    "read_failed": "warn",
    "lookup_applied": "good",
    "lookup_not_found": "warn",
    "lookup_failed": "warn",
}
EFFECT_MEANINGS = {
    "read_only": "No side effect: no approval, no ledger key, never at risk in a replay; an "
    "unknown outcome is simply asked again.",
    "idempotent": "Applies one Idempotency-Key at most once and answers a repeat with the "
    "first result: an unknown outcome is sent again with the same key (bounded), and a "
    "replay does not put it at risk.",
    "unsafe": "No guarantee: an unknown outcome is reconciled or handed to a person, never "
    "sent again.",
}
ATTEMPT_KINDS = {
    "send": "",
    "safe_retry": "safe retry: the previous attempt never left",
    "resend": "resend, same key",
}


def declaration_label(declaration) -> str:
    """`effect`, lookup and who declared it, in one line (a Tool or a recorded copy)."""
    if declaration is None:
        return ""
    if not isinstance(declaration, dict):
        declaration = declaration.declaration
    parts = [declaration.get("effect") or "unsafe"]
    if declaration.get("lookup"):
        parts.append("lookup")
    who = declaration.get("declared_by") or {}
    text = ", ".join(parts)
    if who:
        text += f" (declared by {who.get('kind')}:{who.get('name')})"
    return text


def _audit_entry(event) -> TimelineEntry:
    lines = []
    before = (event.before or {}).get("state")
    after = (event.after or {}).get("state")
    if before and after and before != after:
        lines.append(f"{before} → {after}")
    for key in ("block_reason", "failure_reason", "resolution", "verdict", "claimed_by"):
        if value := (event.after or {}).get(key):
            lines.append(f"{key.replace('_', ' ')}: {value}")
    if event.verb == "approval.grant" and (expires := (event.after or {}).get("expires_at")):
        lines.append(f"expires {expires}")
    title = VERB_TITLES.get(event.verb, event.verb)
    after = event.after or {}
    if after.get("kind") == "resend":
        title = f"Claimed for a resend (attempt {after.get('attempt')}, same key)"
        lines.append(f"allowed by the declaration: {declaration_label(after.get('declaration'))}")
    return TimelineEntry(
        at=event.at,
        kind="audit",
        title=title,
        actor=f"{event.actor_kind}:{event.actor_name}",
        detail=event.reason,
        tone=VERB_TONES.get(event.verb, ""),
        lines=lines,
    )


def action_history(action: Action):
    """(attempts, reconciliations, audit events) of one action: three queries.

    Audit events are the action's own plus those of its approval request, its approval and
    its ledger entry, all of its tenant (found by tenant and object id, on the
    audit_tenant_object_at index).
    """
    attempts = list(action.attempts.order_by("number"))
    reads = list(action.reconciliations.order_by("at", "id"))
    objects = Q(object_type="action", object_id=str(action.pk)) | Q(
        object_type="ledgerentry", object_id=str(action.ledger_entry_id)
    )
    if action.approval_request_id:
        objects |= Q(object_type="approvalrequest", object_id=str(action.approval_request_id))
    if action.approval_id:
        objects |= Q(object_type="approval", object_id=str(action.approval_id))
    events = AuditEvent.objects.filter(objects, tenant_id=action.tenant_id)
    events = list(events.order_by("at", "id"))
    return attempts, reads, events


# Audit verbs whose content the timeline already shows as a read (said once, not twice).
SHOWN_AS_READS = {"action.reconcile_failed", "action.recheck"}


def action_timeline(attempts, reads, events) -> list[TimelineEntry]:
    entries = [_audit_entry(e) for e in events if e.verb not in SHOWN_AS_READS]
    for a in attempts:
        outcome = a.outcome or "in flight"
        kind = ATTEMPT_KINDS.get(a.kind, "")
        title = f"Dispatch attempt {a.number}{f' ({kind})' if kind else ''}: "
        title += outcome.replace("_", " ")
        if a.http_status:
            title += f" (HTTP {a.http_status})"
        lines = [f"started {a.started_at:%H:%M:%S.%f}"[:-3]]
        if a.declaration:
            lines.append(f"allowed by the declaration: {declaration_label(a.declaration)}")
        if a.finished_at:
            ms = (a.finished_at - a.started_at).total_seconds() * 1000
            lines.append(f"took {ms:.0f} ms")
        entries.append(
            TimelineEntry(
                at=a.started_at,
                kind="attempt",
                title=title,
                detail=a.detail,
                tone=OUTCOME_TONES.get(a.outcome, "info"),
                lines=lines,
            )
        )
    for r in reads:
        lines = []
        if r.expected_version is not None or r.actual_version is not None:
            lines.append(
                f"expected version {_v(r.expected_version)}, authoritative {_v(r.actual_version)}"
            )
        if r.diff:
            lines.append("differs: " + ", ".join(d["field"] for d in r.diff))
        who = r.actor or {}
        label = VERDICT_MEANING.get(r.verdict, r.verdict)
        title = f"Reconciliation read: {label}"
        if r.kind == "lookup":
            title = f"Lookup of the key: {label}"
            if r.declaration:
                lines.append(
                    f"asked because the tool declares lookup: true ({r.declaration.get('effect')})"
                )
        entries.append(
            TimelineEntry(
                at=r.at,
                kind="read",
                title=title,
                actor=f"{who.get('kind', '')}:{who.get('name', '')}" if who else "",
                detail=r.detail,
                tone=VERDICT_TONES.get(r.verdict, ""),
                lines=lines,
            )
        )
    entries.sort(key=lambda e: e.at)
    return entries


def _v(value) -> str:
    return "none" if value is None else str(value)


@dataclass
class DiffRow:
    field: str
    desired: str
    actual: str
    matches: bool
    present: bool = True


@dataclass
class Diff:
    """Desired vs authoritative, field by field, from the latest read that saw the state."""

    read: object | None  # the Reconciliation the table comes from
    latest: object | None  # the latest read of any kind (may be a failed one)
    rows: list
    extra: list  # authoritative fields the action does not set
    expected_version: int | None
    after_version: int | None  # what the version should be if this action applied it
    actual_version: int | None
    version_ok: bool | None  # None when not guarded by expected_version

    @property
    def mismatches(self) -> list[str]:
        return [r.field for r in self.rows if not r.matches]

    @property
    def read_age(self) -> str:
        return age_label(self.read.at) if self.read else ""


def action_diff(action: Action, reads) -> Diff:
    latest = reads[-1] if reads else None
    seen = next((r for r in reversed(reads) if r.authoritative is not None), None)
    expected = action.expected_version
    after = expected + 1 if expected is not None else None
    if seen is None:
        return Diff(None, latest, [], [], expected, after, None, None)
    state = seen.authoritative.get("state") or {}
    actual_version = seen.authoritative.get("version")
    rows = [
        DiffRow(
            field=name,
            desired=compact_json(wanted),
            actual=compact_json(state[name]) if name in state else "(absent)",
            matches=name in state and state[name] == wanted,
            present=name in state,
        )
        for name, wanted in action.desired_state.items()
    ]
    extra = [
        (name, compact_json(value))
        for name, value in sorted(state.items())
        if name not in action.desired_state
    ]
    version_ok = None if expected is None else actual_version == after
    return Diff(seen, latest, rows, extra, expected, after, actual_version, version_ok)
