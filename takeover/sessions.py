"""Django's database sessions, read with one hand-written statement.

Every console request reads its session first. The ORM's `Session.objects.get(...)` cost
~0.4 ms of Python for a one-row primary-key read that takes ~0.1 ms (the profile of the
queue page); the statement here is the same read: the row of that key, unexpired.
Everything else (writes, expiry, cycling the key on sign-in) is Django's.
"""

from django.contrib.sessions.backends import db
from django.db import connections, router
from django.utils import timezone

from core.rows import columns, instance


class SessionStore(db.SessionStore):
    def _get_session_from_db(self):
        model = self.model
        sql = (
            f"SELECT {columns(model, 's')} FROM {model._meta.db_table} s "  # noqa: S608
            "WHERE s.session_key = %s AND s.expire_date > %s"
        )
        with connections[router.db_for_read(model)].cursor() as cursor:
            cursor.execute(sql, [self.session_key, timezone.now()])
            row = cursor.fetchone()
        if row is None:
            self._session_key = None  # as Django's: a key that matches nothing is dropped
            return None
        return instance(model, row)
