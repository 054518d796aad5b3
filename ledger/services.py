"""Ledger services. Callers own the transaction; each function assumes it runs inside one."""

from django.db import connection, transaction
from django.utils import timezone

from core import rows
from core.audit import Actor, Verb, audit
from core.errors import StateConflict, reason_required
from core.models import Role

from .models import LedgerEntry, LedgerStatus
from .states import LEDGER

# An entry may be revoked only when the effect can no longer fire under this key.
REVOCABLE = {LedgerStatus.APPLIED, LedgerStatus.FAILED, LedgerStatus.UNKNOWN, LedgerStatus.VOID}


def ledger_live_entry(tenant, key: str) -> LedgerEntry | None:
    return LedgerEntry.objects.filter(tenant=tenant, key=key, revoked_at__isnull=True).first()


RESERVE = """
INSERT INTO ledger_ledgerentry
  (id, tenant_id, key, generation, fingerprint, tool, action_id, status,
   created_at, updated_at, revoked_reason)
SELECT %(id)s, %(tenant)s, %(key)s::varchar, coalesce(max(generation), 0) + 1, %(fingerprint)s,
       %(tool)s, %(action)s, %(status)s, %(now)s, %(now)s, ''
FROM ledger_ledgerentry WHERE tenant_id = %(tenant)s AND key = %(key)s
ON CONFLICT DO NOTHING
RETURNING generation
"""


def ledger_reserve(
    *,
    tenant,
    key: str,
    fingerprint: str,
    tool: str,
    action_id,
    actor: Actor,
    audit_later: bool = False,
) -> LedgerEntry | None:
    """Take `key` for a new effect. Returns None if a live entry already holds it.

    One INSERT … ON CONFLICT DO NOTHING: racing reservations of one key serialize on the
    key's unique indexes, the loser's INSERT waits for the winner's commit and then does
    nothing, after which the winner's entry is visible to the loser's next statement (READ
    COMMITTED). No savepoint, no exception: a savepoint would cost a subtransaction id per
    proposal. The generation counts past revoked entries of the key.

    No conflict target, on purpose: then *every* unique index is an arbiter. With only the
    partial index of live keys named, two reservations that both passed PostgreSQL's
    conflict check before either row existed computed the same generation, and the loser
    failed on the other unique index, (tenant, key, generation), with a unique violation:
    a 500 instead of the winner's action.

    `audit_later`: the caller writes `ledger_reserve_audit(entry)` itself, in the same
    transaction (the proposal batches it with its own event).
    """
    entry, params = ledger_reserve_statement(
        tenant=tenant, key=key, fingerprint=fingerprint, tool=tool, action_id=action_id
    )
    entry = ledger_reserve_execute(entry, RESERVE, params)
    if entry is not None and not audit_later:
        audit(**ledger_reserve_audit(entry, actor=actor))
    return entry


def ledger_reserve_execute(entry: LedgerEntry, sql: str, params: dict) -> LedgerEntry | None:
    """Run `RESERVE` (or a statement built around it that answers the generation first) for
    `ledger_reserve_statement`'s entry: the entry, saved, or None when the key is live."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    entry.generation = row[0]
    entry._state.adding, entry._state.db = False, connection.alias
    return entry


def ledger_reserve_statement(*, tenant, key, fingerprint, tool, action_id):
    """The unsaved entry a reservation would create, and `RESERVE`'s parameters for it (the
    proposal runs `RESERVE` inside its own one-statement insert)."""
    now = timezone.now()
    entry = rows.new(  # a new id, and `reserved`: the model's defaults
        LedgerEntry,
        tenant=tenant,
        key=key,
        fingerprint=fingerprint,
        tool=tool,
        action_id=action_id,
        created_at=now,
        updated_at=now,
    )
    params = {
        "id": entry.id,
        "tenant": tenant.pk,
        "key": key,
        "fingerprint": fingerprint,
        "tool": tool,
        "action": action_id,
        "status": entry.status,
        "now": now,
    }
    return entry, params


def ledger_reserve_audit(entry: LedgerEntry, *, actor: Actor) -> dict:
    return {
        "actor": actor,
        "verb": Verb.LEDGER_RESERVE,
        "obj": entry,
        "after": {
            "key": entry.key,
            "generation": entry.generation,
            "action_id": str(entry.action_id),
        },
    }


def ledger_set_status(entry_id, status: str, *, source: str) -> None:
    """Mirror the owning action's move, `source` → `status`, checked against the ledger's
    table (`ledger/states.py`); audited by the action's own transition, in its transaction.
    A move of the action that leaves the entry where it is (unknown → needs_human) writes
    nothing."""
    ledger_set_status_many([entry_id], status, source=source)


def ledger_set_status_many(entry_ids, status: str, *, source: str) -> None:
    if status == source or not entry_ids:
        return
    LEDGER.check(source, status)
    LedgerEntry.objects.filter(pk__in=entry_ids).update(status=status, updated_at=timezone.now())


def ledger_hold_live(entry_id) -> bool:
    """Lock an entry for the rest of the caller's transaction; False if it was revoked.

    For a caller about to let the effect fire again under this key (a resend): the lock
    orders it against `ledger_revoke`, which locks the same row, so either the revocation
    comes first and nothing is sent, or the entry is in flight first and cannot be revoked.
    """
    return (
        LedgerEntry.objects.select_for_update(no_key=True)
        .filter(pk=entry_id, revoked_at__isnull=True)
        .exists()
    )


def ledger_revoke(entry: LedgerEntry, *, actor: Actor, reason: str) -> LedgerEntry:
    """Declare the effect undone: the key may then be used again, as a new generation.
    Admins only, with a reason."""
    actor.require(Role.ADMIN)
    reason = reason_required(reason)
    with transaction.atomic():
        entry = LedgerEntry.objects.select_for_update(no_key=True).get(pk=entry.pk)
        if entry.revoked_at is not None:
            raise StateConflict("This ledger entry is already revoked.")
        if entry.status not in REVOCABLE:
            raise StateConflict(
                f"The effect under this key is still {entry.status}; it may yet be applied. "
                "Revoke it once its action has settled."
            )
        entry.revoked_at = timezone.now()
        entry.revoked_reason = reason
        entry.revoked_by = actor.as_dict()
        entry.save(update_fields=["revoked_at", "revoked_reason", "revoked_by", "updated_at"])
        audit(
            actor=actor,
            verb=Verb.LEDGER_REVOKE,
            obj=entry,
            before={"revoked": False},
            after={"revoked": True, "key": entry.key, "generation": entry.generation},
            reason=reason,
        )
    return entry
