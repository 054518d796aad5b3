"""The API's resource shapes, as plain dicts. Fields may be added, never renamed."""


def _iso(value):
    return value.isoformat() if value else None


def attempt_dict(a) -> dict:
    return {
        "number": a.number,
        "started_at": _iso(a.started_at),
        "finished_at": _iso(a.finished_at),
        "outcome": a.outcome or None,
        "http_status": a.http_status,
        "detail": a.detail,
        "kind": a.kind,
        "declaration": a.declaration,
    }


def reconciliation_dict(r) -> dict:
    return {
        "id": r.pk,
        "at": _iso(r.at),
        "authoritative": r.authoritative,
        "verdict": r.verdict,
        "diff": r.diff,
        "expected_version": r.expected_version,
        "actual_version": r.actual_version,
        "detail": r.detail,
        "actor": r.actor,
        "kind": r.kind,
        "declaration": r.declaration,
    }


def action_dict(action, *, replayed=False, content_changed=False) -> dict:
    """Expects tenant, principal, tool selected and attempts/reconciliations prefetched."""
    return action_resource(
        action,
        tenant=action.tenant.slug,
        principal=action.principal.name,
        tool=action.tool.name,
        claimed_by=action.claimed_by.get_username() if action.claimed_by_id else None,
        attempts=[attempt_dict(a) for a in action.attempts.all()],
        reconciliations=[reconciliation_dict(r) for r in action.reconciliations.all()],
        replayed=replayed,
        content_changed=content_changed,
    )


def action_resource(
    action,
    *,
    tenant: str,
    principal: str,
    tool: str,
    claimed_by: str | None,
    attempts: list[dict],
    reconciliations: list[dict],
    replayed: bool = False,
    content_changed: bool = False,
) -> dict:
    """The Action resource; names and timelines come ready from the caller (the ORM path
    above, or the one-statement reads of `runs.selectors`)."""
    return {
        "id": str(action.pk),
        "run": str(action.run_id),
        "tenant": tenant,
        "principal": principal,
        "tool": tool,
        "target": action.target,
        "desired_state": action.desired_state,
        "expected_version": action.expected_version,
        "idempotency_key": action.idempotency_key,
        "effect": action.effect,
        **standing(action),
        "resolution_reason": action.resolution_reason or None,
        "approval_id": str(action.approval_id) if action.approval_id else None,
        "approval_request_id": str(action.approval_request_id)
        if action.approval_request_id
        else None,
        "replayed": replayed,
        "content_changed": content_changed,
        "attempts": attempts,
        "reconciliations": reconciliations,
        "claimed_by": claimed_by,
        "reason": action.reason or None,
        "origin": action.origin,
        "client": action.client or None,
        "resolved_on_read": action.resolved_on_read_id,
        "acknowledged_at": _iso(action.acknowledged_at),
        "acknowledged_by": action.acknowledged_by,
        "acknowledge_note": action.acknowledge_note or None,
        "created_at": _iso(action.created_at),
        "updated_at": _iso(action.updated_at),
    }


def standing(action) -> dict:
    """Where an action stands: its state and why (a reason not given is null, not blank)."""
    return {
        "state": action.state,
        "block_reason": action.block_reason or None,
        "failure_reason": action.failure_reason or None,
        "resolution": action.resolution or None,
    }


def action_summary(action) -> dict:
    return {
        "id": str(action.pk),
        "tool": action.tool.name,
        "target": action.target,
        "idempotency_key": action.idempotency_key,
        **standing(action),
        "created_at": _iso(action.created_at),
    }


def run_dict(run, *, tools_executed, actions=None, verdict=None) -> dict:
    """The run resource from what `runs.selectors.run_resource` read: `actions` (and the
    replay verdict, an added field: what a replay without force would answer, and which
    called tools operators cleared) only on the detail."""
    data = {
        "id": str(run.pk),
        "tenant": run.tenant.slug,
        "principal": run.principal.name,
        "trigger": run.trigger,
        "config": run.config,
        "input_file": {"name": run.input_name, "size": run.input_size, "sha256": run.input_sha256}
        if run.input_file
        else None,
        "session_id": run.session_id,
        "status": run.status,
        "attempts": run.attempts,
        "error_message": run.error_message,
        "replay_of": str(run.replay_of_id) if run.replay_of_id else None,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "heartbeat_at": _iso(run.heartbeat_at),
        "tools_executed": tools_executed,
    }
    if actions is not None:
        data["actions"] = [action_summary(a) for a in actions]
    if verdict is not None:
        data["replay_verdict"] = verdict.as_dict()
    return data


def approval_dict(approval) -> dict:
    return {
        "id": str(approval.pk),
        "state": approval.effective_state,
        **approval.binding(),
        "tenant": approval.tenant.slug,
        "expires_at": _iso(approval.expires_at),
        "granted_by": approval.granted_by,
        "granted_at": _iso(approval.granted_at),
        "consumed_by_action": str(approval.consumed_by_action)
        if approval.consumed_by_action
        else None,
        "consumed_at": _iso(approval.consumed_at),
        "request": str(approval.request_id) if approval.request_id else None,
        "revoked_at": _iso(approval.revoked_at),
        "revoke_reason": approval.revoke_reason or None,
    }


def approval_request_dict(request) -> dict:
    return {
        "id": str(request.pk),
        "action": str(request.action_id),
        "state": request.state,
        **request.binding(),
        "tenant": request.tenant.slug,
        "created_at": _iso(request.created_at),
        "expires_at": _iso(request.expires_at),
        "decided_by": request.decided_by or None,
        "decided_at": _iso(request.decided_at),
        "reason": request.reason or None,
    }


def ledger_dict(entry) -> dict:
    return {
        "id": str(entry.pk),
        "tenant": entry.tenant.slug,
        "key": entry.key,
        "generation": entry.generation,
        "tool": entry.tool,
        "action": str(entry.action_id) if entry.action_id else None,
        "status": entry.status,
        "fingerprint": entry.fingerprint,
        "created_at": _iso(entry.created_at),
        "updated_at": _iso(entry.updated_at),
        "revoked": entry.revoked_at is not None,
        "revoked_at": _iso(entry.revoked_at),
        "revoked_reason": entry.revoked_reason or None,
        "revoked_by": entry.revoked_by,
    }


def audit_dict(event) -> dict:
    return {
        "id": str(event.pk),
        "at": _iso(event.at),
        "actor": event.actor,
        "verb": event.verb,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "before": event.before,
        "after": event.after,
        "reason": event.reason,
        "request_id": event.request_id,
        "client_request_id": event.client_request_id,
    }


def tool_dict(tool, *, with_url: bool = True, with_secret: bool = False) -> dict:
    """A tool; without its base_url and signing facts for callers that only use it
    (principals): where a tool lives is the deployer's and the tenant admin's business, not
    the agent's. `signing_secret` only once, when it was generated (`with_secret`)."""
    out = {
        "id": str(tool.pk),
        "name": tool.name,
        "base_url": tool.base_url,
        "effect": tool.effect,
        "lookup": tool.lookup,
        "declared_by": tool.declared_by,
        "declared_at": _iso(tool.declared_at),
        "requires_approval": tool.requires_approval,
        "identity_fields": tool.identity_fields,
        "timeout_seconds": tool.timeout_seconds,
        "created_at": _iso(tool.created_at),
        "signing_secret_created_at": _iso(tool.signing_secret_created_at),
        "previous_secret_expires_at": _iso(tool.previous_secret_expires_at),
        "kind": tool.kind,
    }
    if tool.mcp:  # an MCP tool's upstream (operators only, like base_url)
        out["mcp"] = {
            k: tool.mcp.get(k)
            for k in ("tool", "target_argument", "read_tool", "lookup_tool", "annotations")
        }
        out["mcp"]["suggested_effect"] = tool.mcp.get("suggested")
    if with_secret:
        out["signing_secret"] = tool.signing_secret
    if not with_url:
        for operator_only in (
            "base_url",
            "mcp",
            "signing_secret_created_at",
            "previous_secret_expires_at",
        ):
            out.pop(operator_only, None)
    return out


def token_dict(token, raw: str | None = None) -> dict:
    """An API token as admins see it: never its secret, except `token` once at creation."""
    from django.utils import timezone

    body = {
        "id": str(token.pk),
        "label": token.label,
        "name": token.name,
        "owner": token.owner,
        "state": token.state_at(timezone.now()),
        "created_at": _iso(token.created_at),
        "expires_at": _iso(token.expires_at),
        "last_used_at": _iso(token.last_used_at),
        "revoked_at": _iso(token.revoked_at),
        "rotated_from": str(token.rotated_from_id) if token.rotated_from_id else None,
    }
    if raw is not None:
        body["token"] = raw
    return body


def force_request_dict(request) -> dict:
    return {
        "id": str(request.pk),
        "run": str(request.run_id),
        "state": request.state,
        "requested_by": request.requested_by,
        "reason": request.reason,
        "tools_at_risk": request.tools_at_risk,
        "decided_by": request.decided_by,
        "decided_at": request.decided_at.isoformat() if request.decided_at else None,
        "decision_reason": request.decision_reason or None,
        "new_run": str(request.new_run_id) if request.new_run_id else None,
        "created_at": request.created_at.isoformat(),
    }


def replay_record(run_or_record) -> dict:
    """The replay history row for GET /replays."""
    record = getattr(run_or_record, "replay_record", run_or_record)
    return {
        "id": str(record.pk),
        "original_run": str(record.original_run_id),
        "new_run": str(record.new_run_id),
        "actor": record.actor,
        "forced": record.forced,
        "reason": record.reason,
        "tools_at_risk": record.tools_at_risk,
        "safe_tools": record.safe_tools,
        "at": record.at.isoformat(),
    }
