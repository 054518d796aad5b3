"""What the engine tells people: the notifications of runs, actions and approval requests
(the mechanism, channels and delivery are in `core/notifications.py`).

Two ways in:
- **Changes** call the `notify_*` functions from inside the service transaction that makes
  the change (`action_move` to needs_human, `_create_action` opening an approval request,
  `run_replay` with force), so the event commits or rolls back with it. A worker is woken
  after commit, deduplicated like any wake-up.
- **Time** is the sweep's: `alerts_sweep` (every SWEEP_INTERVAL_SECONDS) finds actions
  unknown for longer than their tenant's threshold, pending requests about to expire, and
  pending requests over the approval SLA, and emits each once (an event is unique per kind
  and subject, so racing sweeps and later sweeps emit nothing more). It looks only at the
  tenants where a channel listens for the kind, so a tenant without notifications costs
  one small query per kind and sweep.
"""

from datetime import timedelta

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalRequest, RequestState
from core import notifications as n
from core.models import Tenant

from .models import Action
from .states import ActionState
from .wakeup import wake_workers


def _emit(**kwargs) -> int:
    created = n.emit(**kwargs)
    if created:
        # After commit, never inside: a drainer must find the committed rows.
        transaction.on_commit(wake_workers, robust=True)
    return created


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def _action_data(action: Action) -> dict:
    return {
        "action": str(action.pk),
        "run": str(action.run_id),
        "principal": action.principal.name,
        "tool": action.tool.name,
        "target": action.target,
        "desired_state": action.desired_state,
        "expected_version": action.expected_version,
        "idempotency_key": action.idempotency_key,
        "state": action.state,
    }


def notify_needs_human(action: Action, *, why: str) -> int:
    """Reconciliation could not prove the outcome (inside the move's transaction)."""
    return _emit(
        tenant=action.tenant,
        kind="action.needs_human",
        subject_type="action",
        subject_id=action.pk,
        summary=f"{action.tool.name} → {action.target} needs a human: {why}.",
        path=reverse("console:action", args=[action.pk]),
        data={**_action_data(action), "why": why},
    )


def _request_data(request: ApprovalRequest, action: Action | None) -> dict:
    data = {
        "approval_request": str(request.pk),
        "action": str(request.action_id),
        "principal": request.principal.name,
        "tool": request.tool.name,
        "target": request.target,
        "desired_state": request.desired_state,
        "expected_version": request.expected_version,
        "created_at": request.created_at.isoformat(),
        "expires_at": request.expires_at.isoformat(),
    }
    if action is not None:
        data["run"] = str(action.run_id)
        data["reason"] = action.reason
    return data


def notify_approval_requested(request: ApprovalRequest, action: Action) -> int:
    """An action waits for an approver (inside the proposal's transaction)."""
    said = f" The agent says: “{action.reason}”" if action.reason else ""
    return _emit(
        tenant=request.tenant,
        kind="approval.requested",
        subject_type="approvalrequest",
        subject_id=request.pk,
        summary=f"Approval requested: {request.tool.name} → {request.target} "
        f"(principal {request.principal.name}).{said}",
        path=reverse("console:approvals") + f"#request-{request.pk}",
        data=_request_data(request, action),
    )


def notify_force_replay(run, new_run, *, actor, reason: str, tools_at_risk) -> int:
    """A forced replay was created (inside the replay's transaction)."""
    at_risk = (
        "unknown"
        if tools_at_risk is None
        else (", ".join(tools_at_risk) if tools_at_risk else "none")
    )
    return _emit(
        tenant=run.tenant,
        kind="replay.forced",
        subject_type="run",
        subject_id=new_run.pk,
        summary=f"{actor.kind}:{actor.name} forced a replay of run {str(run.pk)[:8]} "
        f"(new run {str(new_run.pk)[:8]}). Tools at risk: {at_risk}. Reason: {reason}",
        path=reverse("console:run", args=[new_run.pk]),
        data={
            "original_run": str(run.pk),
            "new_run": str(new_run.pk),
            "actor": actor.as_dict(),
            "reason": reason,
            "tools_at_risk": tools_at_risk,
        },
    )


def notify_force_request(request, *, actor) -> int:
    """A force replay waits for a second admin (inside the request's transaction)."""
    at_risk = (
        "unknown"
        if request.tools_at_risk is None
        else (", ".join(request.tools_at_risk) if request.tools_at_risk else "none")
    )
    return _emit(
        tenant=request.tenant,
        kind="replay.force_requested",
        subject_type="force_request",
        subject_id=request.pk,
        summary=f"{actor.kind}:{actor.name} asks to force a replay of run "
        f"{str(request.run_id)[:8]}; a different admin must confirm. Tools at risk: "
        f"{at_risk}. Reason: {request.reason}",
        path=reverse("console:force_review", args=[request.pk]),
        data={
            "request": str(request.pk),
            "run": str(request.run_id),
            "requested_by": actor.as_dict(),
            "reason": request.reason,
            "tools_at_risk": request.tools_at_risk,
        },
    )


# --- the sweep: time-based notifications, once each ---------------------------------------------

SWEEP_LIMIT = 200  # per kind and tenant and sweep; the rest come at the next sweep


def alerts_sweep(*, now=None) -> int:
    """Emit the time-based notifications that are due; returns how many events fired."""
    now = now or timezone.now()
    return _unknown_overdue(now) + _requests_expiring(now) + _requests_over_sla(now)


def _unknown_overdue(now) -> int:
    kind = "action.unknown_overdue"
    fired = 0
    for tenant in Tenant.objects.filter(
        pk__in=n.tenants_listening(kind), unknown_alert_seconds__gt=0
    ):
        limit = timedelta(seconds=tenant.unknown_alert_seconds)
        # `updated_at` is when the action last changed state: reads that keep failing do
        # not touch it, so it says since when the action has been unknown.
        due = (
            Action.objects.filter(
                tenant=tenant, state=ActionState.UNKNOWN, updated_at__lte=now - limit
            )
            .exclude(pk__in=n.already_fired(kind, tenant.pk))
            .select_related("tool", "principal", "tenant")
            .order_by("updated_at")[:SWEEP_LIMIT]
        )
        for action in due:
            since = (now - action.updated_at).total_seconds()
            with transaction.atomic():
                fired += bool(
                    _emit(
                        tenant=tenant,
                        kind=kind,
                        subject_type="action",
                        subject_id=action.pk,
                        summary=f"{action.tool.name} → {action.target} has been unknown for "
                        f"{_minutes(since)} (threshold {_minutes(limit.total_seconds())}): "
                        "reconciliation has not proven its outcome yet.",
                        path=reverse("console:action", args=[action.pk]),
                        data={
                            **_action_data(action),
                            "unknown_since": action.updated_at.isoformat(),
                            "reconcile_failures": action.reconcile_failures,
                        },
                    )
                )
    return fired


def _pending(tenant, kind):
    return (
        ApprovalRequest.objects.filter(tenant=tenant, state=RequestState.PENDING)
        .exclude(pk__in=n.already_fired(kind, tenant.pk))
        .select_related("tool", "principal", "tenant")
    )


def _actions_of(requests) -> dict:
    ids = [r.action_id for r in requests]
    return {a.pk: a for a in Action.objects.filter(pk__in=ids)}


def _requests_expiring(now) -> int:
    kind = "approval.expiring"
    fired = 0
    for tenant in Tenant.objects.filter(
        pk__in=n.tenants_listening(kind), approval_expiry_warning_seconds__gt=0
    ):
        warn = timedelta(seconds=tenant.approval_expiry_warning_seconds)
        due = list(
            _pending(tenant, kind)
            .filter(expires_at__gt=now, expires_at__lte=now + warn)
            .order_by("expires_at")[:SWEEP_LIMIT]
        )
        actions = _actions_of(due)
        for request in due:
            left = (request.expires_at - now).total_seconds()
            with transaction.atomic():
                fired += bool(
                    _emit(
                        tenant=tenant,
                        kind=kind,
                        subject_type="approvalrequest",
                        subject_id=request.pk,
                        summary=f"Approval request for {request.tool.name} → {request.target} "
                        f"expires in {_minutes(left)}; without a decision its action is "
                        "blocked (approval_expired).",
                        path=reverse("console:approvals") + f"#request-{request.pk}",
                        data=_request_data(request, actions.get(request.action_id)),
                    )
                )
    return fired


def _requests_over_sla(now) -> int:
    """The SLA escalation: a request that waited longer than its tenant's approval SLA."""
    kind = "approval.sla_breached"
    fired = 0
    for tenant in Tenant.objects.filter(
        pk__in=n.tenants_listening(kind), approval_sla_seconds__gt=0
    ):
        sla = timedelta(seconds=tenant.approval_sla_seconds)
        due = list(
            _pending(tenant, kind)
            .filter(created_at__lte=now - sla, expires_at__gt=now)
            .order_by("created_at")[:SWEEP_LIMIT]
        )
        actions = _actions_of(due)
        for request in due:
            waited = (now - request.created_at).total_seconds()
            with transaction.atomic():
                fired += bool(
                    _emit(
                        tenant=tenant,
                        kind=kind,
                        subject_type="approvalrequest",
                        subject_id=request.pk,
                        summary=f"Approval request for {request.tool.name} → {request.target} "
                        f"has waited {_minutes(waited)}, over the {_minutes(sla.total_seconds())}"
                        " approval SLA.",
                        path=reverse("console:approvals") + f"#request-{request.pk}",
                        data={
                            **_request_data(request, actions.get(request.action_id)),
                            "sla_seconds": tenant.approval_sla_seconds,
                        },
                    )
                )
    return fired
