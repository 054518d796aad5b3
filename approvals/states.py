"""The statuses of approvals and approval requests, declared once as transition tables
(core.states.Machine), and the reasons an action is blocked, with what each means to a
person (docs/design.md, "The action lifecycle"). `approvals/services.py` holds the one
guarded function of each move.
"""

from django.db import models

from core.states import Machine


class ApprovalState(models.TextChoices):
    GRANTED = "granted"
    CONSUMED = "consumed"
    REVOKED = "revoked"
    # Never stored: a granted approval past its expires_at *reads* as expired. Storing it
    # would need a sweep racing the consumer; the consume UPDATE checks the clock instead.
    EXPIRED = "expired"


S = ApprovalState
APPROVAL = Machine(
    "An approval",
    ApprovalState,
    {
        # granted → expired happens by the clock alone (never written); consumed at claim,
        # revoked by an approver. One-shot: nothing leads back to granted.
        S.GRANTED: {S.CONSUMED, S.REVOKED, S.EXPIRED},
        S.CONSUMED: set(),
        S.REVOKED: set(),
        S.EXPIRED: set(),
    },
)


class RequestState(models.TextChoices):
    PENDING = "pending"
    GRANTED = "granted"
    DENIED = "denied"
    EXPIRED = "expired"


R = RequestState
REQUEST = Machine(
    "An approval request",
    RequestState,
    {
        R.PENDING: {R.GRANTED, R.DENIED, R.EXPIRED},
        R.GRANTED: set(),
        R.DENIED: set(),
        R.EXPIRED: set(),
    },
)


class BlockReason(models.TextChoices):
    APPROVAL_EXPIRED = "approval_expired"
    APPROVAL_CONSUMED = "approval_consumed"
    APPROVAL_MISMATCH = "approval_mismatch"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_REVOKED = "approval_revoked"
    APPROVAL_NOT_FOUND = "approval_not_found"


# What each reason means to a person (the console's queue and timeline say this).
BLOCK_REASON_MEANING = {
    BlockReason.APPROVAL_EXPIRED: "approval expired",
    BlockReason.APPROVAL_CONSUMED: "approval already used",
    BlockReason.APPROVAL_MISMATCH: "approval for a different intent",
    BlockReason.APPROVAL_DENIED: "approval denied",
    BlockReason.APPROVAL_REVOKED: "approval revoked",
    BlockReason.APPROVAL_NOT_FOUND: "approval not found",
}
assert set(BLOCK_REASON_MEANING) == set(BlockReason), "every block reason needs a meaning"
