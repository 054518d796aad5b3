"""The application's own database connection cannot change or remove an audit row: not
directly, and not by switching the append-only triggers off by any of the known routes."""

import pytest
from django.db import DatabaseError, connections, transaction

from core.models import AuditEvent
from tests.builders import SETUP

ROUTES = [
    # pgtrigger's own escape hatch: a session variable any role may set (the real trigger
    # names are filled in below).
    "SET pgtrigger.ignore = '{TRIGGERS}'",
    # Replica mode skips ordinary triggers; superuser only.
    "SET session_replication_role = replica",
    # Disabling the triggers outright; owner only.
    "ALTER TABLE core_auditevent DISABLE TRIGGER USER",
    "ALTER TABLE core_auditevent DISABLE TRIGGER ALL",
]

WRITES = [
    "UPDATE core_auditevent SET reason = 'rewritten' WHERE id = %s",
    "DELETE FROM core_auditevent WHERE id = %s",
    "TRUNCATE core_auditevent",
]


@pytest.fixture
def event(world):
    return AuditEvent.objects.filter(tenant=world.tenant).order_by("at").first()


def test_the_application_does_not_connect_as_the_owner(live_db):
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT current_user, tableowner, "
            "has_table_privilege(current_user, 'core_auditevent', 'UPDATE'), "
            "has_table_privilege(current_user, 'core_auditevent', 'DELETE'), "
            "has_table_privilege(current_user, 'core_auditevent', 'TRUNCATE'), "
            "has_table_privilege(current_user, 'core_auditevent', 'INSERT'), "
            "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user) "
            "FROM pg_tables WHERE tablename = 'core_auditevent'"
        )
        user, owner, update, delete, truncate, insert, superuser = cursor.fetchone()
    assert user != owner
    assert (update, delete, truncate, superuser) == (False, False, False, False)
    assert insert is True
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_tables WHERE tableowner = current_user")
        assert cursor.fetchone()[0] == 0  # it owns nothing


def test_the_application_may_use_every_other_table_and_sequence(live_db):
    """Every table the migrations made (tokens, wake-ups, console decisions, axes' sign-in
    records, …) is granted to the application's role after migrate; only the audit table
    is held back."""
    with connections["default"].cursor() as cursor:
        # MATERIALIZED: the privilege functions must only see our own relations (the
        # planner may otherwise call them on catalog and TOAST rows first, and fail).
        cursor.execute(
            "WITH ours AS MATERIALIZED (SELECT c.oid, c.relname, c.relkind FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S')) "
            "SELECT relname FROM ours WHERE CASE WHEN relkind = 'S' "
            "THEN NOT has_sequence_privilege(oid, 'USAGE') "
            "WHEN relname = 'core_auditevent' THEN false "
            "ELSE NOT (has_table_privilege(oid, 'SELECT') AND has_table_privilege(oid, 'INSERT') "
            "AND has_table_privilege(oid, 'UPDATE') AND has_table_privilege(oid, 'DELETE')) END"
        )
        assert cursor.fetchall() == []
        cursor.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert cursor.fetchone()[0] > 20


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("write", WRITES)
def test_the_application_cannot_switch_the_audit_triggers_off(event, route, write):
    before = AuditEvent.objects.filter(pk=event.pk).values().get()
    # This tenant's events: other processes (a worker still settling) may append elsewhere.
    ours = AuditEvent.objects.filter(tenant_id=event.tenant_id)
    total = ours.count()
    refused = []
    try:
        with transaction.atomic(using="default"), connections["default"].cursor() as cursor:
            if "{TRIGGERS}" in route:
                cursor.execute(
                    "SELECT string_agg('core_auditevent:' || tgname, ',') FROM pg_trigger "
                    "WHERE tgrelid = 'core_auditevent'::regclass AND NOT tgisinternal"
                )
                names = cursor.fetchone()[0]
                assert "audit_append_only" in names and "audit_no_truncate" in names
                route = route.replace("{TRIGGERS}", names)
            try:
                with transaction.atomic(using="default"):
                    cursor.execute(route)
            except DatabaseError as exc:
                refused.append(("route", str(exc)))
            with transaction.atomic(using="default"):
                cursor.execute(write, [event.pk] if "%s" in write else [])
            refused.append(("write", f"accepted, {cursor.rowcount} rows"))
            transaction.set_rollback(True, using="default")
    except DatabaseError as exc:
        refused.append(("write", str(exc)))
    kind, message = refused[-1]
    assert kind == "write" and "permission denied" in message, refused
    if "pgtrigger" not in route:
        # The switch itself is refused too (owner or superuser only).
        assert refused[0][0] == "route", refused
    assert AuditEvent.objects.filter(pk=event.pk).values().get() == before
    assert ours.count() == total


def test_the_application_still_appends_audit_events(world):
    from core.audit import Verb, audit

    count = AuditEvent.objects.filter(tenant=world.tenant).count()
    # Any declared verb (audit() refuses others); no settings change with it here.
    audit(actor=SETUP, verb=Verb.TENANT_SETTINGS, obj=world.tenant, tenant=world.tenant)
    assert AuditEvent.objects.filter(tenant=world.tenant).count() == count + 1


def test_the_owner_connection_is_the_guarded_maintenance_path(event):
    """The owner can remove audit rows, but only by saying so to pgtrigger (what a retention
    command does); rolled back here."""
    import pgtrigger

    owner = connections["owner"]
    with owner.cursor() as cursor:
        cursor.execute(
            "SELECT current_user = tableowner FROM pg_tables WHERE tablename = 'core_auditevent'"
        )
        assert cursor.fetchone()[0] is True
    with pytest.raises(DatabaseError), transaction.atomic(using="owner"):
        AuditEvent.objects.using("owner").filter(pk=event.pk).delete()
    with transaction.atomic(using="owner"):
        with pgtrigger.ignore("core.AuditEvent:audit_append_only", databases=["owner"]):
            deleted, _ = AuditEvent.objects.using("owner").filter(pk=event.pk).delete()
        assert deleted == 1
        transaction.set_rollback(True, using="owner")
    assert AuditEvent.objects.filter(pk=event.pk).exists()
