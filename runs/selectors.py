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

from core.models import Tool
from core.rows import columns, instance, width

from .models import Action, Run

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

PROPOSE_LOOKUP = f"""
SELECT {columns(Run, "r")}, {columns(Tool, "t")}, e.fingerprint, d.*
FROM runs_run r
LEFT JOIN core_tool t ON t.tenant_id = r.tenant_id AND t.name = %(tool)s
LEFT JOIN ledger_ledgerentry e
  ON e.tenant_id = r.tenant_id AND e.key = %(key)s AND e.revoked_at IS NULL
LEFT JOIN LATERAL ({ACTION_DETAIL} WHERE a.id = e.action_id) d ON true
WHERE r.id = %(run)s AND r.principal_id = %(principal)s
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
    from .presenters import action_resource

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


@dataclass
class ProposeLookup:
    run: Run | None
    tool: Tool | None
    fingerprint: str | None  # of the live ledger entry holding the key
    action: Action | None  # that entry's action
    resource: dict | None  # the action as the API shows it


def propose_lookup(*, run_id, principal, tool_name: str, key: str) -> ProposeLookup:
    try:
        run_id = uuid.UUID(str(run_id))
    except ValueError:
        return ProposeLookup(None, None, None, None, None)
    with connection.cursor() as cursor:
        cursor.execute(
            PROPOSE_LOOKUP,
            {"run": run_id, "principal": principal.pk, "tool": tool_name, "key": key},
        )
        row = cursor.fetchone()
    if row is None:
        return ProposeLookup(None, None, None, None, None)
    nr, nt = width(Run), width(Tool)
    run = instance(Run, row[:nr])
    run.tenant, run.principal = principal.tenant, principal
    tool = instance(Tool, row[nr : nr + nt]) if row[nr] is not None else None
    if tool is not None:
        tool.tenant = principal.tenant
    fingerprint = row[nr + nt]
    rest = row[nr + nt + 1 :]
    if fingerprint is None or rest[0] is None:
        return ProposeLookup(run, tool, fingerprint, None, None)
    action, resource = _action_view(rest)
    return ProposeLookup(run, tool, fingerprint, action, resource)
