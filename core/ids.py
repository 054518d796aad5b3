"""Row ids: UUIDs that begin with the time they were made (version 7, RFC 9562).

Every id that is a primary key, and every id an index holds (the audit log's `object_id`
is an action's, a run's, an entry's id), goes into a B-tree. A random id (version 4) lands
on a random leaf page: each insert dirties a page nobody else touched, and the first change
to a page after a checkpoint writes the whole page to the WAL. An id that begins with the
time lands on the right edge, beside the ids made just before it: the same few pages take
every insert. Measured on the audit log at 550,000 rows (pgbench, four rows per
transaction, after a checkpoint): 14 KB of WAL per transaction with the row's id and its
`object_id` random, 12 KB with the row's id by time, 3.3 KB with both. A deployment's
tables only grow, so this is WAL that grows with the table against WAL that does not.

Which rows get them: those nobody reads or types by id, the ones written per effect and never
shown (audit events, ledger entries, notification events; the audit rows the engine writes
by hand, in Python and in SQL). Runs, actions, approvals and the like keep random ids
(`uuid.uuid4`): the console shows and searches them by their first 8 hex digits, and
under this layout those are the same for everything made in the same minute.

The first 48 bits are milliseconds since the epoch; then the version, 12 random bits, the
variant, 62 random bits: 74 random bits, so two ids made in the same millisecond still
differ (and are in no particular order between themselves: only locality is wanted). An
id says when its row was made, which every row's `created_at` says already.

Python 3.14's `uuid.uuid7` is the same thing; this is for 3.11 to 3.13.
"""

import os
import time
import uuid

_VERSION = 0x7 << 76
_VARIANT = 0x2 << 62
_RANDOM = ((1 << 80) - 1) & ~(0xF << 76) & ~(0x3 << 62)


def new_id() -> uuid.UUID:
    """A new row id: version 7, its first 48 bits the time in milliseconds."""
    milliseconds = time.time_ns() // 1_000_000
    random = int.from_bytes(os.urandom(10)) & _RANDOM
    return uuid.UUID(int=(milliseconds << 80) | _VERSION | _VARIANT | random)


# The same in SQL, for the rows a set-based statement inserts (PostgreSQL 18 has uuidv7();
# the servers before it do not): the time's 48 bits in hex, the version, then the last 19
# hex digits of a random id, its variant bits among them.
NEW_ID_SQL = (
    "(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '7'"
    " || substr(replace(gen_random_uuid()::text, '-', ''), 14))::uuid"
)
