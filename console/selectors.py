"""Reads for the console: who is looking (the scope), the queue, an action's timeline and
diff, the approvals inbox, runs, replays and the audit log.

Every getter here is scoped to the signed-in operator's memberships: another tenant's object
is a 404 (`Http404`), never a 403 that would confirm it exists. Role checks happen in the
views, against the membership of the *object's* tenant, so an operator who is an approver in
one tenant and on-call in another gets exactly the rights of each.
"""

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from types import SimpleNamespace

from django.db.models import Count, F, OuterRef, Q, Subquery
from django.utils import timezone

from approvals.models import Approval, RequestState
from approvals.selectors import REQUESTS
from console.templatetags.console_format import compact_json
from core import compiled, pagination
from core.access import Viewer
from core.audit import Verb
from core.errors import ValidationFailed
from core.models import Membership, Role, Tool
from core.pagination import decode_cursor
from runs.dryrun import dry_run_for
from runs.models import (
    Action,
    Attempt,
    ForceReplayRequest,
    ForceRequestState,
    Reconciliation,
    Replay,
    Run,
)
from runs.replay import replay_verdict, tools_executed
from runs.selectors import open_queue
from runs.states import (
    BLOCK_REASON_MEANING,
    GATEWAY_CALLED,
    TERMINAL,
    VERDICT_MEANING,
    ActionState,
    Verdict,
)

from . import counts as counts_module
from . import queue_rows
from .action_history import DiffRow
from .counts import capped, capped_sum, counts_sql

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


# What on-call can act on: an outcome to prove (unknown, needs_human), a block to
# acknowledge. Approval requests have their own place (Approvals), for approvers.
QUEUE_STATES = [ActionState.UNKNOWN, ActionState.NEEDS_HUMAN, ActionState.BLOCKED]
# The API's GET /queue holds approval requests too; the console's queue shows them when
# its state filter asks for them (approvers decide them on Approvals).
FILTER_STATES = [*QUEUE_STATES, ActionState.AWAITING_APPROVAL]


@dataclass
class QueueFilters:
    tenant_ids: list
    state: str = ""  # one of FILTER_STATES, or "" for all of QUEUE_STATES
    tool_ids: list | None = None  # None: any tool
    age: str = ""

    @property
    def states(self) -> list[str]:
        return [self.state] if self.state else list(QUEUE_STATES)


@dataclass
class QueuePage:
    actions: list  # the page's Action rows, each with `why`
    next_cursor: str | None
    counts: dict  # state → count, under the tenant/tool/age filters (not the state one)
    total: int
    signature: str = ""
    counts_list: list = field(default_factory=list)

    @cached_property
    def rows(self) -> list[dict]:
        """The cells the page prints; a refresh that finds nothing new never asks."""
        return queue_rows.present(self.actions)


def _open_actions(filters: QueueFilters, *, now=None, states=None):
    """The queue's rows under the console's filters: the one open-queue query the API's
    `GET /queue` runs too (`runs.selectors.open_queue`)."""
    if states is None:
        on_call = filters.state != ActionState.AWAITING_APPROVAL
        states = QUEUE_STATES if on_call else FILTER_STATES
    return open_queue(
        filters.tenant_ids,
        states=states,
        tool_ids=filters.tool_ids,
        older_than=AGES.get(filters.age),
        now=now,
    )


def queue_page(filters: QueueFilters, cursor=None, *, size=PAGE_SIZE) -> QueuePage:
    """The actions that need a person, oldest first, one keyset page; and counts per state.

    Two queries whatever the page size: the rows (with the tool, tenant, principal and claim
    holder joined, and the latest attempt and reconciliation folded in as subqueries) and
    the counts. Both are compiled once per shape of the filters (`core.compiled`): a
    refresh every two seconds from every open queue builds no queryset.
    """
    now = timezone.now()
    counts = _queue_counts(filters, now)
    rows, next_cursor = _queue_rows(filters, cursor, now, size)
    sig = signature(
        [(str(a.pk), a.state, a.claimed_by_id, a.updated_at.isoformat(), a.why) for a in rows],
        sorted(counts.items()),
        next_cursor,
    )
    counts_list = [(state, ActionState(state).label, counts[state]) for state in QUEUE_STATES]
    return QueuePage(
        actions=rows,
        next_cursor=next_cursor,
        counts=counts,
        total=capped_sum(counts.values()),
        signature=sig,
        counts_list=counts_list,
    )


def _filter_values(filters: QueueFilters, now) -> dict:
    """The filters' values, as `core.compiled` binds them (the rest is the shape)."""
    values = {"tenant_ids": list(filters.tenant_ids)}
    if filters.tool_ids is not None:
        values["tool_ids"] = list(filters.tool_ids)
    if older := AGES.get(filters.age):
        values["cutoff"] = now - older
    return values


def _filters_from(filters: QueueFilters, tenant_ids, tool_ids=None, cutoff=None):
    """`filters` with its values replaced (by `core.compiled`'s markers), and the `now` that
    gives `cutoff` back as the age filter's bound."""
    older = AGES.get(filters.age)
    shaped = QueueFilters(tenant_ids, state=filters.state, tool_ids=tool_ids, age=filters.age)
    return shaped, (cutoff + older if older else None)


def _queue_counts(filters: QueueFilters, now) -> dict:
    # The on-call states, and the one filtered on when it is another (awaiting approval).
    states = sorted({*QUEUE_STATES, filters.state} if filters.state else set(QUEUE_STATES))

    def build(**values):
        shaped, at = _filters_from(filters, **values)
        base = _open_actions(shaped, now=at)
        return counts_sql([base.filter(state=state) for state in states])

    key = ("queue-counts", filters.state, filters.age, counts_module.COUNT_CAP)
    found, values = compiled.statement(key, build, **_filter_values(filters, now))
    (row,) = found.fetch(values)
    return capped(states, row)


class QueueRow(SimpleNamespace):
    """One row of the queue as `queue_rows_queryset` selects it (its names as attributes)."""


def _queue_rows(filters: QueueFilters, cursor, now, size):
    """One keyset page of the rows, oldest first, and the next page's cursor. A cursor whose
    id is not a UUID (another list's) shows the first page, like a malformed one."""
    values = _filter_values(filters, now)
    if cursor is not None:
        try:
            values["after_at"], values["after_pk"] = cursor[0], uuid.UUID(str(cursor[1]))
        except ValueError:
            cursor = None

    def build(after_at=None, after_pk=None, **rest):
        shaped, at = _filters_from(filters, **rest)
        qs = queue_rows_queryset(shaped, now=at).order_by("created_at", "pk")
        after = (after_at, after_pk) if after_at is not None else None
        return pagination.after(qs, after, newest_first=False)[: size + 1]

    key = ("queue-rows", filters.state, filters.age, size)
    found, values = compiled.statement(key, build, **values)
    rows = [QueueRow(**row) for row in found.dicts(values)]
    more = len(rows) > size
    rows = rows[:size]
    for row in rows:
        row.why = queue_reason(row)
    last = rows[-1] if more else None
    return rows, (pagination.encode_cursor(last.created_at, last.pk) if last else None)


def queue_rows_queryset(filters: QueueFilters, base=None, *, now=None):
    """The queue's rows, unordered and unpaged (`keyset` orders them by (created_at, id)),
    as `.values()`: the columns the page reads (`queue_rows.FIELDS` and `NAMES`).

    Filtered on one state, that state is the statement's only state constant: with the open
    states' IN beside it, PostgreSQL cannot tell the index on (tenant, state, tool,
    created_at) yields the rows in order, and sorts every match (thousands) for a page."""
    if filters.state:
        qs = _open_actions(filters, now=now, states=[filters.state])
    else:
        qs = base if base is not None else _open_actions(filters, now=now)
    last_attempt = Attempt.objects.filter(action=OuterRef("pk")).order_by("-number")
    last_read = Reconciliation.objects.filter(action=OuterRef("pk")).order_by("-at", "-id")
    return qs.values(*queue_rows.FIELDS).annotate(
        **{name: F(path) for name, path in queue_rows.NAMES.items()},
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

    def build(tenant_ids):
        return (
            Tool.objects.filter(tenant_id__in=tenant_ids).order_by("name").values_list("pk", "name")
        )

    # Compiled once per number of tenants (`core.compiled`): the queue page asks every time.
    found, values = compiled.statement("queue-tools", build, tenant_ids=list(tenant_ids))
    names: dict[str, list] = {}
    for pk, name in found.fetch(values):
        names.setdefault(name, []).append(pk)
    return list(names.items())


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
    # The approver's context: the agent's reason and the run it belongs
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
    dry_run: object = None  # what a replay would do, key by key (runs.dryrun)


def run_detail(run: Run) -> RunDetail:
    actions = list(run.actions.select_related("tool").order_by("created_at", "pk"))
    gateway = {a.tool.name for a in actions if a.state in GATEWAY_CALLED}
    executed = tools_executed(run, gateway)
    verdict = replay_verdict(run, executed, actions)
    replayed_by = list(
        Replay.objects.filter(original_run=run).select_related("new_run").order_by("at")
    )
    record = Replay.objects.filter(new_run=run).first() if run.replay_of_id else None
    with_confirmers([*replayed_by, *([record] if record else [])])
    dry = dry_run_for(run, actions)
    return RunDetail(run, actions, executed, verdict, replayed_by, record, dry)


def with_confirmers(replays) -> list:
    """Each replay with `confirmed_by`: the second admin who confirmed it (four eyes), or
    None. The history names both people."""
    confirmed = dict(
        ForceReplayRequest.objects.filter(
            new_run_id__in=[r.new_run_id for r in replays]
        ).values_list("new_run_id", "decided_by")
    )
    for r in replays:
        r.confirmed_by = confirmed.get(r.new_run_id)
    return replays


def replays_page(tenant, cursor=None):
    qs = Replay.objects.filter(tenant=tenant).select_related("original_run", "new_run")
    rows, next_cursor = keyset(qs, cursor, field_name="at", descending=True)
    return with_confirmers(rows), next_cursor


def force_requests_waiting(scope: Scope):
    """Force replays waiting for a second admin in the current tenant, oldest first, each
    with `mine` (asked by the viewer: they cannot confirm it) and its run's dry run."""
    rows = list(
        ForceReplayRequest.objects.filter(tenant=scope.tenant, state=ForceRequestState.PENDING)
        .select_related("run", "run__principal")
        .order_by("created_at")
    )
    me = scope.user.get_username()
    for r in rows:
        r.mine = r.requested_by.get("kind") == "operator" and r.requested_by.get("name") == me
    return rows


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
        open_queue([after.tenant_id], states=states)
        .filter(Q(claimed_by__isnull=True) | Q(claimed_by=scope.user))
        .exclude(pk=after.pk)
        .select_related("tool")
        .order_by("created_at", "id")
        .first()
    )


def is_terminal(action) -> bool:
    return action.state in TERMINAL
