"""Reads for the console: who is looking (the scope), the queue, an action's timeline and
diff, the approvals inbox, runs, replays and the audit log.

Every getter here is scoped to the signed-in operator's memberships: another tenant's object
is a 404 (`Http404`), never a 403 that would confirm it exists. Role checks happen in the
views, against the membership of the *object's* tenant, so an operator who is an approver in
one tenant and on-call in another gets exactly the rights of each.
"""

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, OuterRef, Q, Subquery
from django.utils import timezone

from approvals.models import Approval, RequestState
from approvals.selectors import REQUESTS
from console.templatetags.console_format import age_label, compact_json
from core import pagination
from core.access import Viewer
from core.audit import Verb
from core.errors import ValidationFailed
from core.models import AuditEvent, Membership, Role, Tool
from core.pagination import decode_cursor
from runs.models import Action, Attempt, Reconciliation, Replay, Run
from runs.replay import replay_verdict, tools_executed
from runs.selectors import open_queue
from runs.states import (
    BLOCK_REASON_MEANING,
    GATEWAY_CALLED,
    OPEN_FOR_HUMANS,
    TERMINAL,
    VERDICT_MEANING,
    ActionState,
    Verdict,
)

PAGE_SIZE = 50

# --- scope ---------------------------------------------------------------------------------


# The console's viewer is `core.access.Viewer` (every membership of the signed-in operator,
# one of them current); views and templates call it `scope`.
Scope = Viewer


# --- small helpers ---------------------------------------------------------------------------


def signature(*parts) -> str:
    """A short digest of what a live region shows, so a poll that finds nothing new can be
    answered with 204 and the browser leaves the DOM (focus, selection, scroll) alone."""
    return hashlib.sha1(repr(parts).encode(), usedforsecurity=False).hexdigest()[:16]


def parse_cursor(raw: str | None):
    """A cursor this console issued, or None for a missing or malformed one (a stale
    bookmark should show the first page, not an error)."""
    if not raw:
        return None
    try:
        return decode_cursor(raw)
    except ValidationFailed:
        return None


def keyset(qs, cursor, *, field_name="created_at", descending=False, size=PAGE_SIZE):
    """(rows, next_cursor) for one page, ordered by (field, id). Never OFFSET. A cursor of
    another list (a stale or edited bookmark) shows the first page, like a malformed one."""
    try:
        return pagination.keyset(qs, cursor, newest_first=descending, field=field_name, size=size)
    except ValidationFailed:
        return pagination.keyset(qs, None, newest_first=descending, field=field_name, size=size)


# --- the queue -----------------------------------------------------------------------------

AGES = {
    "": None,
    "5m": timedelta(minutes=5),
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
AGE_LABELS = {
    "": "Any age",
    "5m": "Older than 5 minutes",
    "1h": "Older than 1 hour",
    "24h": "Older than 24 hours",
    "7d": "Older than 7 days",
}


@dataclass
class QueueFilters:
    tenant_ids: list
    state: str = ""  # one of OPEN_FOR_HUMANS, or "" for all of them
    tool_ids: list | None = None  # None: any tool
    age: str = ""

    @property
    def states(self) -> list[str]:
        return [self.state] if self.state else list(OPEN_FOR_HUMANS)


@dataclass
class QueuePage:
    rows: list
    next_cursor: str | None
    counts: dict  # state → count, under the tenant/tool/age filters (not the state one)
    total: int
    signature: str = ""
    counts_list: list = field(default_factory=list)


def _open_actions(filters: QueueFilters, *, now=None):
    """The queue's rows under the console's filters: the one open-queue query the API's
    `GET /queue` runs too (`runs.selectors.open_queue`)."""
    return open_queue(
        filters.tenant_ids, tool_ids=filters.tool_ids, older_than=AGES.get(filters.age), now=now
    )


def queue_page(filters: QueueFilters, cursor=None, *, size=PAGE_SIZE) -> QueuePage:
    """The actions that need a person, oldest first, one keyset page; and counts per state.

    Two queries whatever the page size: the rows (with the tool, tenant, principal and claim
    holder joined, and the latest attempt and reconciliation folded in as subqueries) and
    the counts.
    """
    now = timezone.now()
    base = _open_actions(filters, now=now)
    counts = {state: 0 for state in OPEN_FOR_HUMANS}
    for row in base.values("state").annotate(n=Count("pk")).order_by():
        counts[row["state"]] = row["n"]

    rows_qs = queue_rows_queryset(filters, base)
    rows, next_cursor = keyset(rows_qs, cursor, size=size)
    for action in rows:
        action.why = queue_reason(action)
    sig = signature(
        [(str(a.pk), a.state, a.claimed_by_id, a.updated_at.isoformat(), a.why) for a in rows],
        sorted(counts.items()),
        next_cursor,
    )
    counts_list = [(state, ActionState(state).label, counts[state]) for state in OPEN_FOR_HUMANS]
    return QueuePage(
        rows=rows,
        next_cursor=next_cursor,
        counts=counts,
        total=sum(counts.values()),
        signature=sig,
        counts_list=counts_list,
    )


def queue_rows_queryset(filters: QueueFilters, base=None):
    """The queue's rows, unordered and unpaged (`keyset` orders them by (created_at, id))."""
    qs = base if base is not None else _open_actions(filters)
    if filters.state:
        qs = qs.filter(state=filters.state)
    last_attempt = Attempt.objects.filter(action=OuterRef("pk")).order_by("-number")
    last_read = Reconciliation.objects.filter(action=OuterRef("pk")).order_by("-at", "-id")
    return qs.select_related("tool", "tenant", "principal", "claimed_by").annotate(
        last_outcome=Subquery(last_attempt.values("outcome")[:1]),
        last_http_status=Subquery(last_attempt.values("http_status")[:1]),
        last_verdict=Subquery(last_read.values("verdict")[:1]),
        last_diff=Subquery(last_read.values("diff")[:1]),
    )


def queue_reason(action) -> str:
    """One line saying why this action is waiting for a person."""
    if action.state == ActionState.AWAITING_APPROVAL:
        return "waiting for an approver"
    if action.state == ActionState.BLOCKED:
        return BLOCK_REASON_MEANING.get(action.block_reason, action.block_reason)
    verdict = getattr(action, "last_verdict", None)
    if action.state == ActionState.NEEDS_HUMAN:
        if verdict == Verdict.MISMATCH:
            fields = ", ".join(d.get("field", "?") for d in (action.last_diff or []))
            return f"{VERDICT_MEANING[verdict]}: {fields}"
        if verdict in {Verdict.MOVED_ON, Verdict.MISSING}:
            return VERDICT_MEANING[verdict]
        return "outcome not proven"
    # unknown
    if verdict == "read_failed":
        return f"reading the authoritative state failed ({action.reconcile_failures}×)"
    if verdict == "lookup_not_found":
        return "the tool reports it never received the key"
    if verdict == "lookup_failed":
        return "the tool's lookup could not tell; reconciling"
    status = getattr(action, "last_http_status", None)
    if status:
        return f"tool answered HTTP {status}; reconciling"
    return "no answer from the tool; reconciling"


def queue_tools(scope: Scope, tenant_ids) -> list[tuple[str, list]]:
    """Tool names in the given tenants, each with its ids (a name can exist per tenant)."""
    names: dict[str, list] = {}
    for pk, name in (
        Tool.objects.filter(tenant_id__in=tenant_ids).order_by("name").values_list("pk", "name")
    ):
        names.setdefault(name, []).append(pk)
    return list(names.items())


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
    its ledger entry (found by object id, on the audit_object index).
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
    events = list(AuditEvent.objects.filter(objects).order_by("at", "id"))
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


# --- approvals -----------------------------------------------------------------------------


def approvals_inbox(tenant, *, recent=20):
    """Pending requests (oldest first) with their actions' states, and recent decisions."""
    pending = list(
        REQUESTS.filter(tenant=tenant, state=RequestState.PENDING).order_by("created_at", "pk")[
            :200
        ]
    )
    decided = list(
        REQUESTS.filter(tenant=tenant)
        .exclude(state=RequestState.PENDING)
        .order_by("-decided_at", "-pk")[:recent]
    )
    ids = [r.action_id for r in pending + decided]
    # The approver's context (issue 12, part 6): the agent's reason and the run it belongs
    # to, with how many actions it proposed. One query for all rows.
    actions = {
        a.pk: a
        for a in Action.objects.filter(pk__in=ids)
        .select_related("run")
        .annotate(run_actions=Count("run__actions"))
    }
    states = {pk: a.state for pk, a in actions.items()}
    approvals = {
        a.request_id: a for a in Approval.objects.filter(request__in=[r.pk for r in decided])
    }
    now = timezone.now()
    sla = timedelta(seconds=tenant.approval_sla_seconds) if tenant.approval_sla_seconds else None
    for r in pending + decided:
        r.action_state = states.get(r.action_id)
        r.action_state_label = ActionState(r.action_state).label.lower() if r.action_state else ""
    for r in pending:
        r.action = actions.get(r.action_id)
        r.over_sla = sla is not None and now - r.created_at > sla
        r.desired_rows = [(k, compact_json(v)) for k, v in r.desired_state.items()]
        r.waiting = r.action_state == ActionState.AWAITING_APPROVAL and r.expires_at > now
    for r in decided:
        r.approval = approvals.get(r.pk)
    return pending, decided


def pending_signature(pending) -> str:
    return signature(
        [
            (str(r.pk), r.action_state, r.action.run.status if r.action else "", r.over_sla)
            for r in pending
        ]
    )


@dataclass
class TargetState:
    """The target's authoritative state now, against what a request would set (a preview
    for the approver: read, compared, shown, and not stored)."""

    read: object  # runs.engine.protocol.Read
    rows: list
    expected_version: int | None
    at: datetime

    @property
    def differs(self) -> list[str]:
        return [r.field for r in self.rows if not r.matches]


def target_state_now(request) -> TargetState:
    from runs.engine import protocol  # the tool protocol's read

    action = Action.objects.select_related("tool").get(pk=request.action_id)
    read = protocol.read_authoritative(action)
    rows = []
    if read.verdict is None:
        for name, wanted in request.desired_state.items():
            present = name in read.state
            rows.append(
                DiffRow(
                    field=name,
                    desired=compact_json(wanted),
                    actual=compact_json(read.state[name]) if present else "(absent)",
                    matches=present and read.state[name] == wanted,
                    present=present,
                )
            )
    return TargetState(read, rows, request.expected_version, timezone.now())


# --- runs ----------------------------------------------------------------------------------


def runs_page(tenant, cursor=None, *, status=""):
    qs = Run.objects.filter(tenant=tenant).select_related("principal")
    if status:
        qs = qs.filter(status=status)
    qs = qs.annotate(n_actions=Count("actions"))
    return keyset(qs, cursor, descending=True)


@dataclass
class RunDetail:
    run: Run
    actions: list
    tools_executed: list | None
    verdict: object
    replayed_by: list  # Replay records whose original is this run
    replay_record: Replay | None  # how this run came to be, if it is a replay


def run_detail(run: Run) -> RunDetail:
    actions = list(run.actions.select_related("tool").order_by("created_at", "pk"))
    gateway = {a.tool.name for a in actions if a.state in GATEWAY_CALLED}
    executed = tools_executed(run, gateway)
    verdict = replay_verdict(run, executed, actions)
    replayed_by = list(
        Replay.objects.filter(original_run=run).select_related("new_run").order_by("at")
    )
    record = Replay.objects.filter(new_run=run).first() if run.replay_of_id else None
    return RunDetail(run, actions, executed, verdict, replayed_by, record)


def replays_page(tenant, cursor=None):
    qs = Replay.objects.filter(tenant=tenant).select_related("original_run", "new_run")
    return keyset(qs, cursor, field_name="at", descending=True)


# --- find anything: search and all actions ---------------------------------------------------

SEARCH_LIMIT = 50


@dataclass
class SearchResult:
    query: str
    kind: str  # what the query was taken for: "id", "id prefix", "key or target", ""
    actions: list
    runs: list

    @property
    def total(self) -> int:
        return len(self.actions) + len(self.runs)

    @property
    def only_link(self) -> str | None:
        """The deep link when exactly one thing matched."""
        from django.urls import reverse

        if len(self.actions) + len(self.runs) != 1:
            return None
        if self.actions:
            return reverse("console:action", args=[self.actions[0].pk])
        return reverse("console:run", args=[self.runs[0].pk])


HEX = set("0123456789abcdef")


def search(scope: Scope, query: str) -> SearchResult:
    """One box for an action id, a run id (full, or the 8-character prefix the console
    shows), an idempotency key (every generation of it) or a target (exact), across the
    operator's tenants. Each lookup uses an index: the primary keys (a prefix becomes a
    key range), the ledger's (tenant, key) and action_by_target."""
    import uuid

    from ledger.models import LedgerEntry

    q = query.strip()
    tenants = scope.tenant_ids
    actions = Action.objects.filter(tenant_id__in=tenants).select_related("tool", "tenant")
    runs = Run.objects.filter(tenant_id__in=tenants).select_related("principal", "tenant")
    if not q or "\x00" in q:
        return SearchResult(q, "", [], [])
    compact = q.lower().replace("-", "")
    if len(compact) == 32 and set(compact) <= HEX:
        pk = uuid.UUID(compact)
        found_actions = list(actions.filter(pk=pk))
        found_runs = list(runs.filter(pk=pk))
        if found_actions or found_runs:
            return SearchResult(q, "id", found_actions, found_runs)
    elif 4 <= len(compact) < 32 and set(compact) <= HEX and "-" not in q[:8]:
        low = uuid.UUID(compact.ljust(32, "0"))
        high = uuid.UUID(compact.ljust(32, "f"))
        found_actions = list(actions.filter(pk__gte=low, pk__lte=high)[:SEARCH_LIMIT])
        found_runs = list(runs.filter(pk__gte=low, pk__lte=high)[:SEARCH_LIMIT])
        if found_actions or found_runs:
            return SearchResult(q, "id prefix", found_actions, found_runs)
    by_key = LedgerEntry.objects.filter(tenant_id__in=tenants, key=q).values("action_id")
    found = actions.filter(Q(pk__in=by_key) | Q(target=q)).order_by("-created_at", "-pk")
    return SearchResult(q, "key or target", list(found[:SEARCH_LIMIT]), [])


@dataclass
class ActionFilters:
    tenant_ids: list
    state: str = ""
    tool_ids: list | None = None
    principal: str = ""
    age: str = ""  # a key of AGES: older than


def all_actions(filters: ActionFilters):
    """Every action, whatever its state, under the filters (newest first via `keyset`)."""
    qs = Action.objects.filter(tenant_id__in=filters.tenant_ids).select_related(
        "tool", "principal", "tenant", "run"
    )
    if filters.state:
        qs = qs.filter(state=filters.state)
    if filters.tool_ids is not None:
        qs = qs.filter(tool_id__in=filters.tool_ids)
    if filters.principal:
        qs = qs.filter(principal__name=filters.principal)
    if older := AGES.get(filters.age):
        qs = qs.filter(created_at__lte=timezone.now() - older)
    return qs


def principal_names(tenant_ids) -> list[str]:
    from core.models import Principal

    return sorted(
        set(Principal.objects.filter(tenant_id__in=tenant_ids).values_list("name", flat=True))
    )


# --- audit ---------------------------------------------------------------------------------


# The audit filter is core.selectors.audit_events, the API's too.


SYSTEM_ACTORS = ["system:dispatcher", "system:reconciler", "system:sweeper", "system:takeover"]


def audit_actors(tenant) -> list[str]:
    """Who can appear in this tenant's audit log: its operators, its principals and the
    system's own actors, as "kind:name" (two small indexed queries, not a scan of the log)."""
    from core.models import Principal

    operators = Membership.objects.filter(tenant=tenant).values_list("user__username", flat=True)
    principals = Principal.objects.filter(tenant=tenant).values_list("name", flat=True)
    return (
        [f"operator:{name}" for name in sorted(operators)]
        + [f"principal:{name}" for name in sorted(principals)]
        + SYSTEM_ACTORS
    )


# The audit filter's pick list: every verb Takeover writes, and each family as a prefix.
AUDIT_VERBS = sorted([*Verb.values, *Verb.families()])


@dataclass
class ConflictView:
    conflict: object
    rows: list  # (field, existing, attempted, differs)


def conflicts_page(tenant_ids, cursor=None):
    """Refused proposals (422 idempotency-conflict), newest first, each with both intents
    side by side: the action holding the key, and what was attempted under it."""
    from runs.models import IdempotencyConflict

    qs = IdempotencyConflict.objects.filter(tenant_id__in=tenant_ids).select_related(
        "principal", "tenant", "existing_action__tool"
    )
    rows, next_cursor = keyset(qs, cursor, field_name="at", descending=True)
    views = []
    for c in rows:
        held = c.existing_action
        existing = (
            {
                "tool": held.tool.name,
                "target": held.target,
                "desired_state": held.desired_state,
                "expected_version": held.expected_version,
            }
            if held
            else {}
        )
        fields = []
        for name in ("tool", "target", "desired_state", "expected_version"):
            mine, theirs = existing.get(name), c.attempted.get(name)
            fields.append((name, compact_json(mine), compact_json(theirs), mine != theirs))
        views.append(ConflictView(c, fields))
    return views, next_cursor


def next_open_action(scope: Scope, after: Action) -> Action | None:
    """The oldest open action in the same tenant that this operator's roles can work, not
    held by someone else (after.pk excluded). One query on the open-queue index."""
    states = []
    if scope.has_role(Role.ONCALL, after.tenant_id):
        states += [ActionState.UNKNOWN, ActionState.NEEDS_HUMAN, ActionState.BLOCKED]
    if scope.has_role(Role.APPROVER, after.tenant_id):
        states.append(ActionState.AWAITING_APPROVAL)
    if not states:
        return None
    return (
        Action.objects.filter(
            tenant_id=after.tenant_id,
            state__in=states,
            acknowledged_at__isnull=True,
        )
        .filter(Q(claimed_by__isnull=True) | Q(claimed_by=scope.user))
        .exclude(pk=after.pk)
        .select_related("tool")
        .order_by("created_at", "id")
        .first()
    )


def is_terminal(action) -> bool:
    return action.state in TERMINAL
