"""core.rows: the JSON a hand-written statement's rows are written as."""

import datetime
import decimal
import json
import uuid

import pytest
from django.utils import timezone
from django.utils.translation import gettext_lazy

from core import rows
from core.models import AuditEvent, Principal, Tenant, Tool
from ledger.models import LedgerEntry
from runs.models import Action, Attempt, Run
from runs.states import ActionState


@pytest.fixture
def w(world):
    world.tool("update_ticket")
    world.run = world.start_run()
    return world


def test_a_row_is_the_json_the_stdlib_encoder_wrote():
    """orjson writes a row as Django's encoder (with full microseconds) did, value for
    value: what it writes itself and what it hands back."""
    row = {
        "id": uuid.uuid4(),
        "at": datetime.datetime(2026, 12, 2, 21, 5, 7, 123456, tzinfo=datetime.UTC),
        "whole_second": datetime.datetime(2026, 12, 2, 21, 5, 7, tzinfo=datetime.UTC),
        "day": datetime.date(2026, 12, 2),
        "state": ActionState.QUEUED,
        "amount": decimal.Decimal("12.50"),
        "lease": datetime.timedelta(seconds=31, microseconds=5),
        "label": gettext_lazy("queued"),
        "desired_state": {"status": "done", "nested": [1, 2.5, None, True, "é\u2028"]},
    }
    written = rows._dumps(row)
    assert isinstance(written, bytes)  # orjson's, not the fallback
    assert json.loads(written) == json.loads(rows._encode(row))


def test_an_integer_past_64_bits_is_written_too(w):
    """orjson refuses it; the stdlib encoder writes it, through the real proposal."""
    text = json.dumps({"tool": "update_ticket", "target": "t-big", "desired_state": {"n": 2**70}})
    response = w.agent.client().post(
        f"/api/v1/runs/{w.run['id']}/actions",
        text,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=f"k-{uuid.uuid4().hex}",
    )
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["id"])
    assert action.desired_state == {"n": 2**70}


def _built(obj) -> dict:
    """What an unsaved instance holds: each field's value (the type alone where the default
    is a callable that answers anew each time: a new id, the time), its cached related
    objects (by identity) and its state."""
    values = {}
    for f in type(obj)._meta.concrete_fields:
        value = obj.__dict__[f.attname]
        values[f.attname] = type(value) if f.has_default() and callable(f.default) else value
    cached = {name: id(value) for name, value in obj._state.fields_cache.items()}
    return {"values": values, "cached": cached, "state": (obj._state.adding, obj._state.db)}


def test_new_builds_the_instance_django_builds(w):
    """`rows.new(Model, **values)` holds what `Model(**values)` holds, field for field, for
    each model a proposal writes: related objects given (cached, their key set, the one to
    one's other side told), defaults for the rest, the database its related objects came
    from."""
    tenant = Tenant.objects.get(pk=w.tenant.pk)  # loaded: its database is known
    run = Run.objects.get(pk=w.run["id"])
    principal, tool = Principal.objects.get(pk=w.principal.pk), Tool.objects.get(tenant=tenant)
    now = timezone.now()
    entry = dict(tenant=tenant, key="k", fingerprint="f", tool="t", action_id=uuid.uuid4())
    cases = [
        (LedgerEntry, entry),
        (LedgerEntry, {**entry, "tenant": None}),
        (AuditEvent, dict(tenant_id=tenant.pk, at=now, verb="action.propose", after={"a": 1})),
        (Run, dict(tenant=tenant, principal=principal, trigger="api")),
    ]
    for model, values in cases:
        assert _built(rows.new(model, **values)) == _built(model(**values)), model
    entry["id"] = uuid.uuid4()  # one entry, built twice
    ours_entry, theirs_entry = rows.new(LedgerEntry, **entry), LedgerEntry(**entry)
    action = dict(
        id=uuid.uuid4(), run=run, principal=principal, tool=tool, target="t-1", state="queued"
    )
    ours = rows.new(Action, tenant=tenant, ledger_entry=ours_entry, **action)
    theirs = Action(tenant=tenant, ledger_entry=theirs_entry, **action)
    assert _built(ours) == {
        **_built(theirs),
        "cached": {**_built(theirs)["cached"], "ledger_entry": id(ours_entry)},
    }
    assert ours.ledger_entry_id == ours_entry.pk
    # the one to one's other side (related_name="+") knows its action, as Django's does
    assert ours_entry._state.fields_cache == {"tenant": tenant, "+": ours}
    assert theirs_entry._state.fields_cache == {"tenant": tenant, "+": theirs}
    # nothing saved: the default database, told to the related object too (as Django does)
    ours_unsaved, theirs_unsaved = Action(target="t-2"), Action(target="t-2")
    ours_attempt = rows.new(Attempt, action=ours_unsaved, number=1)
    theirs_attempt = Attempt(action=theirs_unsaved, number=1)
    assert ours_attempt._state.db == theirs_attempt._state.db == "default"
    assert ours_unsaved._state.db == theirs_unsaved._state.db == "default"
    attempt = rows.new(Attempt, id=7, action=ours, number=1, started_at=now)
    assert _built(attempt) == _built(Attempt(id=7, action=ours, number=1, started_at=now))


def test_new_leaves_to_django_what_it_does_not_build(w):
    """A keyword that is no field, a related object of another model, a property: Django's
    own answer, error included."""
    with pytest.raises(TypeError, match="unexpected keyword arguments: 'nonsense'"):
        rows.new(Attempt, number=1, nonsense=True)
    with pytest.raises(ValueError, match=r'"Attempt.action" must be a "Action" instance'):
        rows.new(Attempt, action=Tenant.objects.get(pk=w.tenant.pk), number=1)
    assert rows.new(Attempt, pk=5, number=1).id == 5


def test_a_row_is_what_save_would_write(w):
    """`record`'s row: every column as its field's `pre_save` answers for a new row, the
    auto_now and auto_now_add timestamps taken now."""
    tenant = Tenant.objects.get(pk=w.tenant.pk)
    before = timezone.now()
    entry = rows.new(LedgerEntry, tenant=tenant, key="k", fingerprint="f", tool="t")
    assert entry.created_at is None  # until the row is taken
    param = rows.record(entry)
    written = json.loads(param.dumps(param.obj))
    assert before <= entry.created_at <= entry.updated_at <= timezone.now()
    expected = {f.column: getattr(entry, f.attname) for f in LedgerEntry._meta.concrete_fields}
    assert written == json.loads(rows._dumps(expected))
    assert written["tenant_id"] == str(tenant.pk) and written["status"] == "reserved"


def test_related_caches_the_object_read_in_the_same_row(w, django_assert_num_queries):
    """`rows.related`: the joined object is what the attribute answers, with no query; an
    object whose key is not the one read is refused, not quietly cached."""
    principal = Principal.objects.get(pk=w.principal.pk)
    tenant = Tenant.objects.get(pk=w.tenant.pk)
    rows.related(principal, tenant=tenant)
    with django_assert_num_queries(0):
        assert principal.tenant is tenant
    with pytest.raises(AssertionError):
        rows.related(principal, tenant=Tenant.objects.get(pk=w.other_tenant.pk))
    assert principal.tenant is tenant
