"""What the engine tells people: the notifications of runs, actions and approval requests
(the mechanism, channels and delivery are the `notifications` app). Each names a kind and
a subject; the console gives the link to the page about it (`notifications.links`).

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
from django.utils import timezone

from approvals.models import ApprovalRequest, RequestState
from core.models import Tenant
from notifications.kinds import KINDS
from notifications.services import already_fired, emit, tenants_listening

from .models import Action
from .states import ActionState
from .wakeup import wake_workers


def _emit(kind: str, subject, summary: str, data: dict) -> int:
    """The `kind` event about `subject` (a row of its tenant's), in the caller's transaction;
    the kind says what type of subject that is."""
    created = emit(
        tenant=subject.tenant,
        kind=kind,
        subject_type=KINDS[kind].subject,
        subject_id=subject.pk,
        summary=summary,
        data=data,
    )
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
    summary = f"{action.tool.name} → {action.target} needs a human: {why}."
    return _emit("action.needs_human", action, summary, {**_action_data(action), "why": why})


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
    summary = (
        f"Approval requested: {request.tool.name} → {request.target} "
        f"(principal {request.principal.name}).{said}"
    )
    return _emit("approval.requested", request, summary, _request_data(request, action))


def _at_risk(tools: list[str] | None) -> str:
    """The tools a forced replay may call again, in words (None: the verdict could not tell)."""
    if tools is None:
        return "unknown"
    return ", ".join(tools) if tools else "none"


def notify_force_replay(run, new_run, *, actor, reason: str, tools_at_risk) -> int:
    """A forced replay was created (inside the replay's transaction)."""
    at_risk = _at_risk(tools_at_risk)
    summary = (
        f"{actor.kind}:{actor.name} forced a replay of run {str(run.pk)[:8]} "
        f"(new run {str(new_run.pk)[:8]}). Tools at risk: {at_risk}. Reason: {reason}"
    )
    data = {
        "original_run": str(run.pk),
        "new_run": str(new_run.pk),
        "actor": actor.as_dict(),
        "reason": reason,
        "tools_at_risk": tools_at_risk,
    }
    return _emit("replay.forced", new_run, summary, data)


def notify_force_request(request, *, actor) -> int:
    """A force replay waits for a second admin (inside the request's transaction)."""
    at_risk = _at_risk(request.tools_at_risk)
    summary = (
        f"{actor.kind}:{actor.name} asks to force a replay of run "
        f"{str(request.run_id)[:8]}; a different admin must confirm. Tools at risk: "
        f"{at_risk}. Reason: {request.reason}"
    )
    data = {
        "request": str(request.pk),
        "run": str(request.run_id),
        "requested_by": actor.as_dict(),
        "reason": request.reason,
        "tools_at_risk": request.tools_at_risk,
    }
    return _emit("replay.force_requested", request, summary, data)


# --- the sweep: time-based notifications, once each ---------------------------------------------

SWEEP_LIMIT = 200  # per kind and tenant and sweep; the rest come at the next sweep


def alerts_sweep(*, now=None) -> int:
    """Emit the time-based notifications that are due; returns how many events fired."""
    now = now or timezone.now()
    return _unknown_overdue(now) + _requests_expiring(now) + _requests_over_sla(now)


def _fire(kind: str, threshold: str, due, notice) -> int:
    """For each tenant listening for `kind` whose `threshold` setting is on: `due(tenant)`
    lists its subjects, `notice(tenant, subject)` says (summary, data); each is emitted in
    its own transaction, once."""
    fired = 0
    tenants = Tenant.objects.filter(pk__in=tenants_listening(kind), **{f"{threshold}__gt": 0})
    for tenant in tenants:
        for subject in due(tenant):
            summary, data = notice(tenant, subject)
            with transaction.atomic():
                fired += bool(_emit(kind, subject, summary, data))
    return fired


def _unknown_overdue(now) -> int:
    kind = "action.unknown_overdue"

    def due(tenant):
        limit = timedelta(seconds=tenant.unknown_alert_seconds)
        # `updated_at` is when the action last changed state: reads that keep failing do
        # not touch it, so it says since when the action has been unknown.
        return (
            Action.objects.filter(
                tenant=tenant, state=ActionState.UNKNOWN, updated_at__lte=now - limit
            )
            .exclude(pk__in=already_fired(kind, tenant.pk))
            .select_related("tool", "principal", "tenant")
            .order_by("updated_at")[:SWEEP_LIMIT]
        )

    def notice(tenant, action):
        since = (now - action.updated_at).total_seconds()
        summary = (
            f"{action.tool.name} → {action.target} has been unknown for {_minutes(since)} "
            f"(threshold {_minutes(tenant.unknown_alert_seconds)}): reconciliation has not "
            "proven its outcome yet."
        )
        data = {
            **_action_data(action),
            "unknown_since": action.updated_at.isoformat(),
            "reconcile_failures": action.reconcile_failures,
        }
        return summary, data

    return _fire(kind, "unknown_alert_seconds", due, notice)


def _pending(tenant, kind, **when):
    """A tenant's pending requests `kind` has not fired for, with their actions loaded."""
    requests = list(
        ApprovalRequest.objects.filter(tenant=tenant, state=RequestState.PENDING, **when)
        .exclude(pk__in=already_fired(kind, tenant.pk))
        .select_related("tool", "principal", "tenant")
        .order_by("expires_at" if "expires_at__lte" in when else "created_at")[:SWEEP_LIMIT]
    )
    actions = {a.pk: a for a in Action.objects.filter(pk__in=[r.action_id for r in requests])}
    for request in requests:
        request.waiting_action = actions.get(request.action_id)
    return requests


def _requests_expiring(now) -> int:
    kind = "approval.expiring"

    def due(tenant):
        warn = timedelta(seconds=tenant.approval_expiry_warning_seconds)
        return _pending(tenant, kind, expires_at__gt=now, expires_at__lte=now + warn)

    def notice(tenant, request):
        left = (request.expires_at - now).total_seconds()
        summary = (
            f"Approval request for {request.tool.name} → {request.target} expires in "
            f"{_minutes(left)}; without a decision its action is blocked (approval_expired)."
        )
        return summary, _request_data(request, request.waiting_action)

    return _fire(kind, "approval_expiry_warning_seconds", due, notice)


def _requests_over_sla(now) -> int:
    """The SLA escalation: a request that waited longer than its tenant's approval SLA."""
    kind = "approval.sla_breached"

    def due(tenant):
        sla = timedelta(seconds=tenant.approval_sla_seconds)
        return _pending(tenant, kind, created_at__lte=now - sla, expires_at__gt=now)

    def notice(tenant, request):
        waited = (now - request.created_at).total_seconds()
        summary = (
            f"Approval request for {request.tool.name} → {request.target} has waited "
            f"{_minutes(waited)}, over the {_minutes(tenant.approval_sla_seconds)} approval SLA."
        )
        data = {
            **_request_data(request, request.waiting_action),
            "sla_seconds": tenant.approval_sla_seconds,
        }
        return summary, data

    return _fire(kind, "approval_sla_seconds", due, notice)
