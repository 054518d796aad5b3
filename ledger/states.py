"""The status of a ledger entry, declared once as a transition table (core.states.Machine).

An entry mirrors the progress of the action that owns its key; the mirror is written in the
action's own transaction by `ledger.services.ledger_set_status`, which checks each move here.
`runs.moves` checks at import that every move of the action table maps onto a legal move
of this one. Revocation is not a status: it is `revoked_at`, on a settled entry.
"""

from django.db import models

from core.states import Machine


class LedgerStatus(models.TextChoices):
    RESERVED = "reserved"  # key taken, effect not attempted yet (may still be)
    IN_FLIGHT = "in_flight"  # a dispatch is under way
    APPLIED = "applied"
    FAILED = "failed"  # the tool said no, or the request provably never left
    UNKNOWN = "unknown"  # may have been applied; not proven either way
    VOID = "void"  # never dispatched and never will be (blocked)


L = LedgerStatus
LEDGER = Machine(
    "A ledger entry",
    LedgerStatus,
    {
        L.RESERVED: {L.IN_FLIGHT, L.VOID},
        L.IN_FLIGHT: {L.APPLIED, L.FAILED, L.UNKNOWN},
        # Reconciled, resolved by a person, or settled by a late definitive answer; or sent
        # again under the same key, to a tool declared to apply a key at most once.
        L.UNKNOWN: {L.APPLIED, L.FAILED, L.IN_FLIGHT},
        L.APPLIED: set(),
        L.FAILED: set(),
        L.VOID: set(),
    },
)
