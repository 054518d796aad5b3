"""Django's PostgreSQL backend, with a health check that costs no round trip, and timestamps
read by psycopg's C loader.

`CONN_HEALTH_CHECKS` makes Django send `SELECT 1` at the start of every request that reuses
a connection: a round trip, and a statement for PostgreSQL to run, on every API call (the
profile of `make bench` showed it at about 8 % of the web's busy time). A persistent
connection that is idle has nothing to read; one whose server went away (a restart, a
failover, an idle timeout) has its end-of-file or the server's termination notice waiting
on the socket. So the check is one non-blocking `poll()` on the socket, and only a socket
with something on it pays the real `SELECT 1`.

What it cannot see: a server that vanished without closing the TCP connection (a host
cut off the network). The first query then fails, the request answers 503 with
`Retry-After` (core.middleware), and Django closes the connection at the end of that
request, as it does without health checks.

Timestamps: for every `timestamptz` it reads, Django's own loader (`BaseTzLoader`) runs
psycopg's pure-Python parser and then sets the tzinfo, since a Python subclass of psycopg's
loader is never swapped for the C one. On a session whose TimeZone is UTC, which Django
sets when USE_TZ is on with UTC, psycopg's C loader already answers with
`datetime.timezone.utc`, the very tzinfo Django's would set: `UTCTimestamptzLoader` lets
it do the work (an effect reads ten timestamps: the token's, the run's, the tool's).
"""

import datetime
import select

import psycopg
from django.db.backends.postgresql import base
from psycopg import adapt, postgres, pq

TIMESTAMPTZ = postgres.types["timestamptz"].oid
# psycopg's own, as it registered it: its C version when psycopg has one.
PSYCOPG_LOADER = psycopg.adapters.get_loader(TIMESTAMPTZ, pq.Format.TEXT)


class UTCTimestamptzLoader(adapt.Loader):
    """psycopg's timestamptz loader, its C version where psycopg has one, for a UTC session.
    Django reads `timezone` off the connection's loader to decide whether a cursor needs a
    loader of its own (`create_cursor`); the C class takes no attribute, hence the wrapper.
    Each instance's `load` is the C loader's own bound method: psycopg calls it directly."""

    timezone = datetime.UTC

    def __init__(self, oid, context=None):
        super().__init__(oid, context)
        self.load = PSYCOPG_LOADER(oid, context).load

    def load(self, data):  # replaced on every instance (__init__)
        raise NotImplementedError


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        if self.timezone is datetime.UTC:  # Django sets the session's TimeZone to UTC
            connection.adapters.register_loader("timestamptz", UTCTimestamptzLoader)
        return connection

    def close_if_health_check_failed(self):
        if (
            self.connection is None
            or self.pool
            or not self.health_check_enabled
            or self.health_check_done
        ):
            return
        if not self._looks_usable() and not self.is_usable():
            self.close()
        self.health_check_done = True

    def _looks_usable(self) -> bool:
        conn = self.connection
        if conn.closed or conn.pgconn.status != pq.ConnStatus.OK:
            return False
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            return False
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return not poller.poll(0)
