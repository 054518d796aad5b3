"""Every status is a declared machine: the tables are checked when they are defined, each
guarded move refuses what its table does not allow, and audit verbs are a closed list."""

import pytest
from django.db import models

from approvals.states import APPROVAL, REQUEST
from core.audit import SYSTEM, Verb, audit
from core.errors import IllegalTransition
from core.states import Machine
from ledger.states import LEDGER
from notifications.services import DELIVERY
from runs.moves import LEDGER_STATUS_FOR, run_move
from runs.states import ACTION, FORCE_REQUEST, RUN, ActionState, RunStatus


class Light(models.TextChoices):
    RED = "red"
    GREEN = "green"


def test_a_table_must_name_every_state_and_only_known_ones():
    with pytest.raises(AssertionError, match="every state needs a row"):
        Machine("A light", Light, {Light.RED: {Light.GREEN}})
    with pytest.raises(AssertionError, match="unknown target"):
        Machine("A light", Light, {Light.RED: {"blue"}, Light.GREEN: set()})


def test_a_machine_refuses_a_move_its_table_does_not_allow():
    light = Machine("A light", Light, {Light.RED: {Light.GREEN}, Light.GREEN: set()})
    light.check(Light.RED, Light.GREEN)
    with pytest.raises(IllegalTransition, match="A light cannot move from green to red"):
        light.check(Light.GREEN, Light.RED)
    assert light.terminal == {Light.GREEN}


@pytest.mark.parametrize(
    ("machine", "source", "target"),
    [
        (ACTION, ActionState.UNKNOWN, ActionState.QUEUED),  # invariant 2
        (ACTION, ActionState.NEEDS_HUMAN, ActionState.DISPATCHING),
        (RUN, RunStatus.SUCCESS, RunStatus.RUNNING),  # a replay is a new run
        (APPROVAL, "consumed", "granted"),  # one-shot
        (REQUEST, "denied", "granted"),
        (LEDGER, "applied", "in_flight"),
        (FORCE_REQUEST, "rejected", "confirmed"),
        (DELIVERY, "delivered", "pending"),  # a delivered notification is never sent again
    ],
)
def test_what_the_product_never_does_is_not_in_any_table(machine, source, target):
    assert not machine.can(source, target)


def test_every_move_of_an_action_is_a_legal_move_of_its_ledger_entry():
    for source, targets in ACTION.table.items():
        for target in targets:
            a, b = LEDGER_STATUS_FOR[source], LEDGER_STATUS_FOR[target]
            assert a == b or LEDGER.can(a, b), (source, target)


def test_a_settled_run_cannot_be_moved_and_nothing_is_written(db):
    from core.services import principal_create, tenant_create
    from runs.models import Run

    tenant = tenant_create(slug="machines", actor=SYSTEM)
    principal, _ = principal_create(tenant=tenant, name="agent", actor=SYSTEM)
    run = Run.objects.create(
        tenant=tenant, principal=principal, trigger="api", config={}, status=RunStatus.SUCCESS
    )
    with pytest.raises(IllegalTransition):
        run_move(run, RunStatus.RUNNING, actor=SYSTEM)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS


def test_a_run_moved_by_someone_else_first_is_not_moved_again(db):
    from core.models import AuditEvent
    from core.services import principal_create, tenant_create
    from runs.models import Run

    tenant = tenant_create(slug="machines-race", actor=SYSTEM)
    principal, _ = principal_create(tenant=tenant, name="agent", actor=SYSTEM)
    run = Run.objects.create(
        tenant=tenant, principal=principal, trigger="api", config={}, status=RunStatus.RUNNING
    )
    stale = Run.objects.get(pk=run.pk)
    assert run_move(run, RunStatus.ERROR, actor=SYSTEM, reason="reaped")
    assert not run_move(stale, RunStatus.SUCCESS, actor=SYSTEM)  # read as running, too late
    assert Run.objects.get(pk=run.pk).status == RunStatus.ERROR
    verbs = AuditEvent.objects.filter(object_id=str(run.pk)).values_list("verb", flat=True)
    assert list(verbs) == [Verb.RUN_ERROR]


def test_an_undeclared_audit_verb_is_refused(db):
    from core.services import tenant_create

    tenant = tenant_create(slug="verbs", actor=SYSTEM)
    with pytest.raises(ValueError, match=r"Unknown audit verb 'tenant\.renamed'"):
        audit(actor=SYSTEM, verb="tenant.renamed", obj=tenant, tenant=tenant)


def test_every_verb_says_what_it_means_to_a_person():
    assert all(v.label and v.label != v.value for v in Verb), "a verb without a meaning"
