"""Reads on the hot paths, each one SQL statement (measured: an ORM query with its prefetches
costs ~0.5 ms of Python each, and a ledger hit used to take nine).

- `propose_lookup`: what `POST /runs/{id}/actions` needs before it decides anything: the
  caller's run, the named tool, and the live ledger entry of the key with its whole action
  (attempts and reconciliation reads included). A ledger hit is answered from this alone.
- `action_view`: `GET /actions/{id}` (and each wake-up of a `?wait=`).

Both return the action as the API resource (`presenters.action_dict`'s shape), built from the
row; `tests/runs/test_selectors.py` holds them equal to the ORM presenter's output.
"""

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Prefetch
from django.http import Http404
from django.utils import timezone

from core.access import TOKEN_COLUMNS, TOKEN_FROM, TOKEN_WHERE, TOKEN_WIDTH, token_of
from core.models import ApiToken, Tool
from core.plans import InConstants
from core.rows import columns, instance, related, width

from .models import Action, Attempt, ForceReplayRequest, Reconciliation, Run
from .presenters import action_resource, run_dict
from .replay import replay_verdict, tools_executed
from .states import GATEWAY_CALLED, OPEN_FOR_HUMANS

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(column: str) -> str:
    # Exact microseconds since the epoch: JSON has no timestamp type, and PostgreSQL's own
    # text form differs from Python's isoformat() (trailing zeros), which the API uses.
    return f"(extract(epoch FROM {column}) * 1000000)::bigint"


# Built from model metadata and constants only, never from input.
ACTION_DETAIL = f"""
SELECT {columns(Action, "a")}, tn.slug, p.name, t.name, u.username,
  (SELECT coalesce(json_agg(json_build_object(
      'number', x.number, 'started_at', {_us("x.started_at")},
      'finished_at', {_us("x.finished_at")}, 'outcome', x.outcome,
      'http_status', x.http_status, 'detail', x.detail, 'kind', x.kind,
      'declaration', x.declaration) ORDER BY x.number), '[]')
   FROM runs_attempt x WHERE x.action_id = a.id),
  (SELECT coalesce(json_agg(json_build_object(
      'id', x.id, 'at', {_us("x.at")}, 'authoritative', x.authoritative,
      'verdict', x.verdict,
      'diff', x.diff, 'expected_version', x.expected_version,
      'actual_version', x.actual_version, 'detail', x.detail, 'actor', x.actor,
      'kind', x.kind, 'declaration', x.declaration)
      ORDER BY x.at, x.id), '[]')
   FROM runs_reconciliation x WHERE x.action_id = a.id)
FROM runs_action a
JOIN core_tenant tn ON tn.id = a.tenant_id
JOIN core_principal p ON p.id = a.principal_id
JOIN core_tool t ON t.id = a.tool_id
LEFT JOIN auth_user u ON u.id = a.claimed_by_id
"""  # noqa: S608


def _propose_lookup(principal: str) -> str:
    return f"""
SELECT {columns(Run, "r")}, {columns(Tool, "t")}, e.fingerprint, d.*
FROM runs_run r
LEFT JOIN core_tool t ON t.tenant_id = r.tenant_id AND t.name = %(tool)s
LEFT JOIN ledger_ledgerentry e
  ON e.tenant_id = r.tenant_id AND e.key = %(key)s AND e.revoked_at IS NULL
LEFT JOIN LATERAL ({ACTION_DETAIL} WHERE a.id = e.action_id) d ON true
WHERE r.id = %(run)s AND r.principal_id = {principal}
"""  # noqa: S608


PROPOSE_LOOKUP = _propose_lookup("%(principal)s")
# The bearer token's lookup (core.access) and the proposal's, for the token's principal, in
# one statement: the token's columns, then the proposal's (all NULL when it finds no run).
TOKEN_PROPOSE_LOOKUP = f"""
SELECT {TOKEN_COLUMNS}, found.*
FROM {TOKEN_FROM}
LEFT JOIN LATERAL ({_propose_lookup("p.id")}) found ON true
WHERE {TOKEN_WHERE}
"""  # noqa: S608


def _time(us: int | None) -> str | None:
    return (EPOCH + timedelta(microseconds=us)).isoformat() if us is not None else None


def _action_view(values) -> tuple[Action, dict]:
    """(the Action, its API resource) from ACTION_DETAIL's columns."""
    n = width(Action)
    action = instance(Action, values[:n])
    tenant, principal, tool, claimed_by, attempts, reads = values[n : n + 6]
    attempts = json.loads(attempts) if isinstance(attempts, str) else attempts
    reads = json.loads(reads) if isinstance(reads, str) else reads
    for a in attempts:
        a["started_at"], a["finished_at"] = _time(a["started_at"]), _time(a["finished_at"])
        a["outcome"] = a["outcome"] or None
    for r in reads:
        r["at"] = _time(r["at"])
    return action, action_resource(
        action,
        tenant=tenant,
        principal=principal,
        tool=tool,
        claimed_by=claimed_by,
        attempts=attempts,
        reconciliations=reads,
    )


def action_view(pk, *, tenant_id=None, principal_id=None) -> tuple[Action, dict] | None:
    """An action and its API resource, in one statement; None if it is not in scope."""
    try:
        pk = uuid.UUID(str(pk))
    except ValueError:
        return None
    where, params = ["a.id = %s"], [pk]
    if principal_id is not None:
        where.append("a.principal_id = %s")
        params.append(principal_id)
    if tenant_id is not None:
        where.append("a.tenant_id = %s")
        params.append(tenant_id)
    with connection.cursor() as cursor:
        cursor.execute(ACTION_DETAIL + " WHERE " + " AND ".join(where), params)
        row = cursor.fetchone()
    return _action_view(row) if row else None


@dataclass(frozen=True)
class ProposeLookup:
    run: Run | None
    tool: Tool | None
    fingerprint: str | None  # of the live ledger entry holding the key
    action: Action | None  # that entry's action
    resource: dict | None  # the action as the API shows it


NOTHING_FOUND = ProposeLookup(None, None, None, None, None)


def propose_lookup(*, run_id, principal, tool_name: str, key: str) -> ProposeLookup:
    try:
        run_id = uuid.UUID(str(run_id))
    except ValueError:
        return NOTHING_FOUND
    with connection.cursor() as cursor:
        cursor.execute(
            PROPOSE_LOOKUP,
            {"run": run_id, "principal": principal.pk, "tool": tool_name, "key": key},
        )
        row = cursor.fetchone()
    return NOTHING_FOUND if row is None else _found(row, principal)


def token_propose_lookup(
    key_hash: str, now, *, run_id: uuid.UUID, tool_name: str, key: str
) -> tuple[ApiToken | None, ProposeLookup | None]:
    """`core.access.token_lookup` and, for the token's principal, `propose_lookup`, in one
    statement. The lookup is None when the token is not a principal's."""
    params = {"key_hash": key_hash, "now": now, "run": run_id, "tool": tool_name, "key": key}
    with connection.cursor() as cursor:
        cursor.execute(TOKEN_PROPOSE_LOOKUP, params)
        row = cursor.fetchone()
    if row is None:
        return None, None
    token = token_of(row)
    if token.principal is None:
        return token, None
    found = row[TOKEN_WIDTH:]
    return token, NOTHING_FOUND if found[0] is None else _found(found, token.principal)


def _found(row, principal) -> ProposeLookup:
    """PROPOSE_LOOKUP's row, as what it found."""
    nr, nt = width(Run), width(Tool)
    run = instance(Run, row[:nr])
    related(run, tenant=principal.tenant, principal=principal)
    tool = instance(Tool, row[nr : nr + nt]) if row[nr] is not None else None
    if tool is not None:
        related(tool, tenant=principal.tenant)
    fingerprint = row[nr + nt]
    rest = row[nr + nt + 1 :]
    if fingerprint is None or rest[0] is None:
        return ProposeLookup(run, tool, fingerprint, None, None)
    action, resource = _action_view(rest)
    return ProposeLookup(run, tool, fingerprint, action, resource)


# --- a run as the API shows it: what it called, and the replay verdict (`runs.replay`) -------


def run_resource(run: Run, *, with_actions: bool = True) -> dict:
    """A run as the API shows it: with its actions and the replay verdict (one query for the
    actions), or without them (one for the tools the gateway saw)."""
    if not with_actions:
        return run_dict(run, tools_executed=tools_executed(run))
    actions = list(run.actions.select_related("tool").order_by("created_at"))
    gateway = {a.tool.name for a in actions if a.state in GATEWAY_CALLED}
    executed = tools_executed(run, gateway)
    verdict = replay_verdict(run, executed, actions)
    return run_dict(run, tools_executed=executed, actions=actions, verdict=verdict)


def run_resources(runs: list[Run]) -> list[dict]:
    """A page of runs as the API lists them: the tools the gateway saw for all of them in
    one query, not one per row."""
    called: dict = {}
    rows = Action.objects.filter(run__in=runs, state__in=GATEWAY_CALLED)
    for run_id, name in rows.values_list("run_id", "tool__name").distinct():
        called.setdefault(run_id, set()).add(name)
    return [run_dict(r, tools_executed=tools_executed(r, called.get(r.pk, set()))) for r in runs]


# --- getters scoped to a viewer, and the open queue ------------------------------------------
# One per object, for the API and the console alike (core.access.Viewer): another tenant's
# object is a 404, and a principal sees only its own runs and actions.

ACTION_OBJECTS = Action.objects.select_related(
    "tenant", "principal", "tool", "run", "claimed_by", "approval_request"
)


def _seen_by(qs, viewer):
    qs = qs.filter(tenant_id__in=viewer.tenant_ids)
    return qs.filter(principal=viewer.principal) if viewer.is_principal else qs


def with_attempts_and_reads(qs):
    """Actions with what their API resource shows: tenant, principal, tool, claim holder,
    attempts and reconciliation reads (three queries for any number of rows)."""
    return qs.select_related("tenant", "principal", "tool", "claimed_by").prefetch_related(
        Prefetch("attempts", queryset=Attempt.objects.order_by("number")),
        Prefetch("reconciliations", queryset=Reconciliation.objects.order_by("at", "id")),
    )


def actions_of(viewer):
    return _seen_by(ACTION_OBJECTS, viewer)


def action_for(viewer, pk, *, with_history: bool = False) -> Action:
    """The action, if the viewer may see it; 404 otherwise. `with_history` also loads its
    attempts and reconciliation reads (the API resource shows them)."""
    qs = with_attempts_and_reads(ACTION_OBJECTS) if with_history else ACTION_OBJECTS
    found = _seen_by(qs, viewer).filter(pk=pk)
    action = found.first()
    if action is None:
        raise Http404("No such action.")
    return action


def runs_of(viewer):
    return _seen_by(Run.objects.select_related("tenant", "principal", "replay_of"), viewer)


def run_for(viewer, pk) -> Run:
    run = runs_of(viewer).filter(pk=pk).first()
    if run is None:
        raise Http404("No such run.")
    return run


def force_request_for(viewer, pk):
    found = ForceReplayRequest.objects.filter(tenant_id__in=viewer.tenant_ids, pk=pk).first()
    if found is None:
        raise Http404("No such force replay request.")
    return found


def tool_ids(tenant_ids, names) -> list:
    """The ids of the tools with these names in these tenants (a name exists per tenant)."""
    return list(
        Tool.objects.filter(tenant_id__in=tenant_ids, name__in=names).values_list("pk", flat=True)
    )


def open_queue(tenant_ids, *, states=None, tool_ids=None, older_than=None, now=None):
    """The actions that need a person, in these tenants: the API's `GET /queue` and the
    console's queue page are this queryset (unordered; each pages it its own way).

    `state IN (open states)` is always present, written as constants (`core.plans`), so the
    planner can prove the predicate of the partial index `action_open_queue` (tenant,
    created_at, id) and use it, in a prepared statement's generic plan too. Acknowledged
    blocked actions have left the queue (`decisions.action_acknowledge`).
    """
    qs = Action.objects.filter(
        InConstants("state", states or OPEN_FOR_HUMANS),
        tenant_id__in=tenant_ids,
        acknowledged_at__isnull=True,
    )
    if tool_ids is not None:
        qs = qs.filter(tool_id__in=tool_ids)
    if older_than:
        qs = qs.filter(created_at__lte=(now or timezone.now()) - older_than)
    return qs
