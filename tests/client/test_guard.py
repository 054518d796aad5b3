"""`guard` on plain functions (the framework adapters only wrap it): what the model gets for
each outcome, against a live server."""

import pytest
from takeover_client import Blocked, guard

from .conftest import event, ticket

pytestmark = pytest.mark.worker

NO_SUCH_APPROVAL = "00000000-0000-4000-8000-000000000000"


@guard("update_ticket", target_from="ticket_id")
def update_ticket(ticket_id: str, status: str, note: str = "") -> dict:
    """Set a ticket's status."""
    return {"status": status}


@guard("close_ticket", target_from="ticket_id", approval_id_from="approval_id")
def close_ticket(ticket_id: str, approval_id: str) -> None:
    """Close a ticket; None means every argument but the target is the desired state."""


def test_the_guard_keeps_the_signature_and_proposes_on_the_current_run(w, agent):
    assert update_ticket.__name__ == "update_ticket"
    assert update_ticket.__doc__ == "Set a ticket's status."
    target = ticket()
    with agent.start_run("webhook", {}, event_id=event()) as run:
        first = update_ticket(target, "open")
        again = update_ticket(ticket_id=target, status="open", note="regenerated")
    assert first["ok"] and first["state"] == "succeeded" and first["replayed"] is False
    assert again["replayed"] is True and again["action_id"] == first["action_id"]
    assert "nothing was sent again" in again["message"]
    assert w.downstream.received(run.key("update_ticket", target)) == 1


def test_a_settled_failure_is_told_to_the_model_or_raised(w, agent):
    guarded_raise = guard(
        "close_ticket",
        target_from="ticket_id",
        approval_id_from="approval_id",
        raise_on_failure=True,
    )(close_ticket.__wrapped__)
    with agent.start_run("chat", {}, event_id=event()):
        told = close_ticket(ticket(), NO_SUCH_APPROVAL)
        with pytest.raises(Blocked):
            guarded_raise(ticket(), NO_SUCH_APPROVAL)
    assert told["ok"] is False and told["state"] == "blocked"
    assert told["reason"] == "approval_not_found" and "Do not retry" in told["message"]
    blocked = w.oncall.client().get(f"/api/v1/actions/{told['action_id']}").json()
    assert blocked["desired_state"] == {}  # the approval id is not part of the state


def test_a_guarded_tool_outside_a_run_refuses_to_act(w):
    with pytest.raises(RuntimeError, match="outside a Takeover run"):
        update_ticket(ticket(), "open")
