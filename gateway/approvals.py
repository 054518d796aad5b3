"""The approval round trip over MCP (docs/mcp.md, "Approvals"): the state Takeover puts in
`input_required` (sealed by the SDK's boundary, gateway/server.py), made single-use here,
and the retry that comes back with it; and the answer for clients before 2026-07-28."""

import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from runs import selectors
from runs.states import IN_PROGRESS, ActionState

from .calls import Caller, CallRefused, Outcome, approval_link, result_for, wait_for
from .models import RequestStateUse


def wait_for_decision(caller: Caller, action_id, seconds: float):
    """While an approval is pending: read again every half second, up to `seconds` (a
    decision wakes no listener; a person's decision is rare, and this waits for one)."""
    deadline = time.monotonic() + seconds
    view = selectors.action_view(action_id, principal_id=caller.principal.pk)
    while view[0].state == ActionState.AWAITING_APPROVAL and time.monotonic() < deadline:
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        view = selectors.action_view(action_id, principal_id=caller.principal.pk)
    if view[0].state in IN_PROGRESS:
        view = wait_for(caller, action_id, max(1.0, deadline - time.monotonic()))
    return view


def use_request_state(caller: Caller, state: dict) -> None:
    """Record that this state came back: once only (the nonce is unique). Expired records
    are deleted on the way (a state older than its seal cannot verify anyway)."""
    now = timezone.now()
    try:
        with transaction.atomic():
            RequestStateUse.objects.create(
                nonce=state["n"],
                tenant_id=caller.principal.tenant_id,
                principal=caller.principal,
                action_id=state["a"],
                used_at=now,
                expires_at=now + timedelta(seconds=settings.MCP_REQUEST_STATE_TTL_SECONDS),
            )
    except IntegrityError as exc:
        raise CallRefused(
            "This requestState was already used: each one is good for one retry. Call the "
            "tool again with the same arguments to get a fresh one."
        ) from exc
    RequestStateUse.objects.filter(expires_at__lt=now).delete()


def resume(caller: Caller, name: str, state: dict) -> Outcome:
    """The retry of a call that waited for an approval, with the state Takeover sealed."""
    if not isinstance(state, dict) or not {"a", "n"} <= set(state):
        raise CallRefused("Invalid or expired requestState")
    use_request_state(caller, state)
    view = selectors.action_view(state["a"], principal_id=caller.principal.pk)
    if view is None or view[1]["tool"] != name:
        raise CallRefused("Invalid or expired requestState")
    view = wait_for_decision(caller, state["a"], settings.MCP_CALL_WAIT_SECONDS)
    if view[0].state == ActionState.AWAITING_APPROVAL:
        return Outcome(awaiting={"action": state["a"], "link": approval_link(caller, state["a"])})
    return Outcome(result_for(view[1], replayed=False, changed=False))


def awaiting_result(awaiting: dict) -> dict:
    """The answer to a client that cannot take `input_required` (before 2026-07-28)."""
    return {
        "content": [
            {
                "type": "text",
                "text": (
                    "awaiting_approval: a person must approve this before it is applied; "
                    f"nothing has been applied. The approval is at {awaiting['link']} . Call "
                    "this tool again later with the same arguments (and the same key, if you "
                    "gave one) to get the outcome; it will be applied at most once."
                ),
            }
        ],
        "structuredContent": {
            "action_id": awaiting["action"],
            "state": ActionState.AWAITING_APPROVAL,
            "approval_url": awaiting["link"],
            "replayed": False,
            "content_changed": False,
        },
        "isError": False,
    }


def new_state(awaiting: dict) -> dict:
    return {"a": awaiting["action"], "n": uuid.uuid4().hex}
