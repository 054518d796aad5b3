"""The guarded moves (`runs/moves.py`): a move the table does not hold is refused, whatever a
tool declares, and every move a dispatch makes leaves its audit event."""

import pytest

from core.models import AuditEvent

from .scenarios import key, target


def test_unsafe_never_moves_back_past_the_boundary_by_table():
    from core.errors import IllegalTransition
    from runs.states import (
        DECLARED_MOVES,
        TRANSITIONS,
        ActionState,
        check_declared_move,
        check_move,
    )

    with pytest.raises(IllegalTransition):
        check_move(ActionState.UNKNOWN, ActionState.DISPATCHING)  # not an ordinary move
    with pytest.raises(IllegalTransition):
        check_declared_move(ActionState.UNKNOWN, ActionState.DISPATCHING, effect="unsafe")
    check_declared_move(ActionState.UNKNOWN, ActionState.DISPATCHING, effect="idempotent")
    assert all(target != ActionState.QUEUED for _, target in DECLARED_MOVES)
    assert all(
        ActionState.QUEUED not in TRANSITIONS[s]
        for s in (ActionState.DISPATCHING, ActionState.UNKNOWN)
    )


@pytest.mark.worker
def test_every_transition_leaves_an_audit_event(w):
    run = w.start_run()
    t = target()
    w.downstream.fault("drop_after_commit", target=t)
    response = w.propose(
        run["id"], key(), tool="update_ticket", target=t, desired_state={"status": "x"}
    )
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "succeeded"
    verbs = list(
        AuditEvent.objects.filter(object_id=action["id"])
        .order_by("at")
        .values_list("verb", flat=True)
    )
    assert verbs == ["action.propose", "action.dispatching", "action.unknown", "action.succeeded"]
