"""The application's database role: it owns nothing and cannot rewrite the audit log.

The audit table's append-only triggers (core/models.py) can be switched off by the owner of
the table, and by a superuser: `ALTER TABLE … DISABLE TRIGGER`, `SET
session_replication_role = replica`, or `SET pgtrigger.ignore = …`. So the application does
not connect as the owner. It connects as its own role ("default" in DATABASES), which after
every `migrate` is granted exactly:

- USAGE on the schema; SELECT, INSERT, UPDATE, DELETE on every table; USAGE, SELECT, UPDATE
  on every sequence;
- on the audit table, SELECT and INSERT only: UPDATE, DELETE and TRUNCATE are revoked;
- default privileges, so that a table a later migration creates is usable at once (the
  audit table's restriction is applied again after every migrate).

A role that does not own the table cannot ALTER it (so cannot disable its triggers), cannot
set session_replication_role (superuser only), and setting pgtrigger.ignore no longer helps
because the UPDATE or DELETE itself is refused by privilege, before any trigger.

Migrations, and owner-only maintenance such as deleting audit rows past retention, use the
"owner" connection. When both connections are the same role (DATABASE_OWNER_URL unset on a
real server), nothing is granted and `check --deploy` warns (takeover.W001).
"""

from django.conf import settings
from django.core import checks
from django.db import connections

AUDIT_TABLE = "core_auditevent"


def _same_role(app: dict, owner: dict) -> bool:
    keys = ("USER", "HOST", "PORT", "NAME")
    return all((app.get(k) or "") == (owner.get(k) or "") for k in keys)


def grant_app_role(sender=None, using="owner", **kwargs) -> None:
    """post_migrate: give the application's role its privileges, minus the audit table's."""
    app = settings.DATABASES["default"]
    conn = connections[using]
    role = app.get("USER")
    if using == "default" or not role or _same_role(app, conn.settings_dict):
        return
    with conn.cursor() as cursor:
        cursor.execute("SELECT current_user")
        if cursor.fetchone()[0] == role:
            return
        quoted = conn.ops.quote_name(role)
        cursor.execute(f"GRANT USAGE ON SCHEMA public TO {quoted}")
        cursor.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {quoted}"
        )
        cursor.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {quoted}")
        # Tables and sequences the owner creates later (the next release's migrations) are
        # usable by the application at once, not only after this hook has run again.
        cursor.execute(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {quoted}"
        )
        cursor.execute(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
            f"GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {quoted}"
        )
        # Last, so that nothing above gives it back.
        cursor.execute(
            f"REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON {AUDIT_TABLE} FROM {quoted}"
        )


def check_app_role(app_configs=None, **kwargs):
    if _same_role(settings.DATABASES["default"], settings.DATABASES["owner"]):
        return [
            checks.Warning(
                "The application connects to the database as the owner of its tables, so it "
                "could switch the audit log's append-only triggers off.",
                hint="Create a role that owns nothing, set DATABASE_URL to it and "
                "DATABASE_OWNER_URL to the owner (README: 'The database roles').",
                id="takeover.W001",
            )
        ]
    return []
