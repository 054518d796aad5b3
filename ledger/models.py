"""The effect ledger: at most one live effect per (tenant, idempotency key).

A key outlives its effect. Revoking an entry (the effect was undone) frees the key for a
new generation; the old entry stays as history. The partial unique index on live entries
is what makes the race between twenty identical proposals produce exactly one winner.
"""

from django.db import models
from django.db.models import Q

from core.ids import new_id

from .states import LedgerStatus

__all__ = ["LedgerEntry", "LedgerStatus"]


class LedgerEntry(models.Model):
    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    # (tenant, key, generation) is unique, which indexes it
    tenant = models.ForeignKey(
        "core.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    key = models.CharField(max_length=255)
    generation = models.PositiveIntegerField(default=1)
    fingerprint = models.CharField(max_length=64)
    tool = models.CharField(max_length=100)
    # The action that owns this key; a plain id, since the ledger knows nothing of runs.
    action_id = models.UUIDField(null=True)
    status = models.CharField(
        max_length=16, choices=LedgerStatus.choices, default=LedgerStatus.RESERVED
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.TextField(blank=True)
    revoked_by = models.JSONField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "ledger entries"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "key"],
                condition=Q(revoked_at__isnull=True),
                name="ledger_one_live_key_per_tenant",
            ),
            models.UniqueConstraint(
                fields=["tenant", "key", "generation"], name="ledger_key_generation_unique"
            ),
            models.CheckConstraint(
                condition=Q(status__in=LedgerStatus.values), name="ledger_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(revoked_at__isnull=True) | ~Q(revoked_reason=""),
                name="ledger_revocation_has_reason",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "tool", "-created_at"], name="ledger_tool")]

    def __str__(self):
        return f"{self.key} (gen {self.generation})"
