"""Ledger services. Callers own the transaction; each function assumes it runs inside one."""

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import Actor, audit
from core.errors import StateConflict

from .models import LedgerEntry, LedgerStatus

# An entry may be revoked only when the effect can no longer fire under this key.
REVOCABLE = {LedgerStatus.APPLIED, LedgerStatus.FAILED, LedgerStatus.UNKNOWN, LedgerStatus.VOID}


def ledger_live_entry(tenant, key: str) -> LedgerEntry | None:
    return LedgerEntry.objects.filter(tenant=tenant, key=key, revoked_at__isnull=True).first()


def ledger_reserve(
    *, tenant, key: str, fingerprint: str, tool: str, action_id, actor: Actor
) -> LedgerEntry | None:
    """Take `key` for a new effect. Returns None if a live entry already holds it.

    Racing reservations of one key serialize on the partial unique index: the loser's
    INSERT waits for the winner's commit and then fails, after which the winner's entry
    is visible to the loser's next statement (READ COMMITTED).
    """
    last = LedgerEntry.objects.filter(tenant=tenant, key=key).order_by("-generation").first()
    generation = last.generation + 1 if last else 1
    try:
        with transaction.atomic():
            entry = LedgerEntry.objects.create(
                tenant=tenant,
                key=key,
                generation=generation,
                fingerprint=fingerprint,
                tool=tool,
                action_id=action_id,
            )
    except IntegrityError:
        return None
    audit(
        actor=actor,
        verb="ledger.reserve",
        obj=entry,
        after={"key": key, "generation": generation, "action_id": str(action_id)},
    )
    return entry


def ledger_set_status(entry_id, status: str) -> None:
    """Mirror the owning action's progress; audited by the action's own transition."""
    LedgerEntry.objects.filter(pk=entry_id).update(status=status, updated_at=timezone.now())


def ledger_revoke(entry: LedgerEntry, *, actor: Actor, reason: str) -> LedgerEntry:
    """Declare the effect undone: the key may then be used again, as a new generation."""
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
            verb="ledger.revoke",
            obj=entry,
            before={"revoked": False},
            after={"revoked": True, "key": entry.key, "generation": entry.generation},
            reason=reason,
        )
    return entry
