"""What can be notified: each kind, who it is for (e-mail goes to members holding its
role), and what it means to a person."""

from dataclasses import dataclass

from core.models import Role


@dataclass(frozen=True)
class Kind:
    name: str
    label: str
    role: str  # who it is for: e-mail goes to members holding this role
    help: str
    subject: str  # what its events are about: their `subject_type`, which the console links


KINDS = {
    k.name: k
    for k in [
        Kind(
            "approval.requested",
            "Approval requested",
            Role.APPROVER,
            "an action waits for an approver",
            "approvalrequest",
        ),
        Kind(
            "approval.sla_breached",
            "Approval over the SLA",
            Role.APPROVER,
            "a request has waited longer than the tenant's approval SLA (escalation)",
            "approvalrequest",
        ),
        Kind(
            "approval.expiring",
            "Approval request about to expire",
            Role.APPROVER,
            "a pending request will expire soon, and its action will be blocked",
            "approvalrequest",
        ),
        Kind(
            "action.needs_human",
            "Action needs a human",
            Role.ONCALL,
            "reconciliation could not prove the outcome; on-call must decide",
            "action",
        ),
        Kind(
            "action.unknown_overdue",
            "Unknown for too long",
            Role.ONCALL,
            "an action has stayed unknown longer than the tenant's threshold",
            "action",
        ),
        Kind(
            "replay.force_requested",
            "Force replay waiting for a second admin",
            Role.ADMIN,
            "an admin asked to force a replay; a different admin must confirm or reject it",
            "force_request",
        ),
        Kind(
            "replay.forced",
            "Force replay done",
            Role.ADMIN,
            "an admin forced a replay of a run whose side effects may repeat",
            "run",
        ),
    ]
}
TEST_KIND = "notification.test"


def roles_receiving(role: str) -> list[str]:
    """The membership roles that imply `role` (admin implies the other two)."""
    return [Role.ADMIN] if role == Role.ADMIN else [role, Role.ADMIN]


def kinds_for_roles(roles) -> list[Kind]:
    return [k for k in KINDS.values() if k.role in roles]
