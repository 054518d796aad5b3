"""Django's PostgreSQL backend, with a health check that costs no round trip.

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
"""

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
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
