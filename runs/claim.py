"""A proposal its proposer dispatches itself: written already claimed, in ONE statement.

Two proposers do this. The MCP gateway passes a read_only tool's call through in the
request's own thread (`propose.read_claimed`), and a request that proposes an effect and
waits long enough for its whole dispatch (`POST /runs/{id}/actions?wait=N`) leases it to
itself (`propose.action_propose(claim=...)`). Either way the action is inserted
`dispatching` under its lease, with the `action.propose` event (as queued), the move to
`dispatching` and attempt 1: the same rows, in the same order, as a proposal followed by a
worker's lease would write, in one statement instead of two transactions. An effect's
statement also takes the key's ledger entry, `in_flight` from the start, and writes nothing
at all when the key is live already.

No worker is told of such an action (none could lease it: it is never `queued` once
committed), and it is written unwatched: its proposer waits for it in its own thread, so its
settle notifies no `?wait` listener unless someone else marks it (runs.waits). Should its
proposer die, the lease runs out and the sweeper hands the action to reconciliation, as for
any worker lost mid-dispatch. An effect's statement commits the usual way, waiting for the
disk: the intent is durable before any byte goes out.
"""

import functools
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from core import rows
from core.audit import Actor, audit_fields, verb_for_state
from core.models import AuditEvent
from ledger.services import RESERVE

from .models import Action, Attempt
from .states import ActionState, check_move

UNFLUSHED = ", set_config('synchronous_commit', 'off', true)"

# A read: no ledger entry. The attempt's id back.
READ_CLAIMED = """
WITH action AS (
    INSERT INTO runs_action
    SELECT r.* FROM jsonb_populate_record(NULL::runs_action, %(action_row)s) r
    RETURNING id
),
events AS (
    INSERT INTO core_auditevent
    SELECT r.* FROM action, jsonb_populate_record(NULL::core_auditevent, %(proposed_row)s) r
    UNION ALL
    SELECT r.* FROM action, jsonb_populate_record(NULL::core_auditevent, %(claimed_row)s) r
),
attempt AS (
    INSERT INTO runs_attempt ({attempt_columns})
    SELECT {attempt_columns}
    FROM action, jsonb_populate_record(NULL::runs_attempt, %(attempt_row)s)
    RETURNING id
)
SELECT id{unflushed} FROM attempt
"""

# An effect: the key's reservation first; everything else is written only if it took the key
# (each insert reads a row of the one before). The entry's generation and the attempt's id
# back, or no row when the key is live.
EFFECT_CLAIMED = f"""
WITH entry AS ({RESERVE.strip()}),
action AS (
    INSERT INTO runs_action
    SELECT r.* FROM entry, jsonb_populate_record(NULL::runs_action, %(action_row)s) r
    RETURNING id
),
events AS (
    INSERT INTO core_auditevent
    SELECT r.* FROM entry, jsonb_populate_record(
        NULL::core_auditevent,
        -- the generation is the statement's to count (past revoked entries of the key)
        jsonb_set(%(reserved_row)s, '{{{{after,generation}}}}', to_jsonb(entry.generation))
    ) r
    UNION ALL
    SELECT r.* FROM action, jsonb_populate_record(NULL::core_auditevent, %(proposed_row)s) r
    UNION ALL
    SELECT r.* FROM action, jsonb_populate_record(NULL::core_auditevent, %(claimed_row)s) r
),
attempt AS (
    INSERT INTO runs_attempt ({{attempt_columns}})
    SELECT {{attempt_columns}}
    FROM action, jsonb_populate_record(NULL::runs_attempt, %(attempt_row)s)
    RETURNING id
)
SELECT entry.generation, attempt.id FROM entry, attempt
"""  # noqa: S608 -- RESERVE is a constant, not input


@functools.cache
def _attempt_columns() -> str:
    return ", ".join(f.column for f in Attempt._meta.concrete_fields if not f.primary_key)


def claimed(action: Action, *, claimer: Actor, lease: timedelta) -> tuple[AuditEvent, Attempt]:
    """Move the unsaved, queued `action` to `dispatching` under a lease of `lease` for
    `claimer`: the move's audit event and attempt 1, unsaved."""
    assert action.state == ActionState.QUEUED, "only a proposal straight to the queue is claimed"
    check_move(ActionState.QUEUED, ActionState.DISPATCHING)
    now = timezone.now()
    action.state, action.lease_expires_at = ActionState.DISPATCHING, now + lease
    action.watched = False  # its claimer waits in its own thread (runs.waits)
    event = rows.new(
        AuditEvent,
        **audit_fields(
            actor=claimer,
            verb=verb_for_state("action", ActionState.DISPATCHING),
            obj=action,
            before={"state": ActionState.QUEUED},
            after={"state": ActionState.DISPATCHING},
            request_id=action.request_id or None,
        ),
    )
    return event, rows.new(Attempt, action_id=action.pk, number=1, started_at=now)


def insert_claimed(
    action: Action,
    attempt: Attempt,
    events: dict[str, AuditEvent],
    *,
    reserve: dict | None = None,
    unflushed: bool = False,
) -> int | None:
    """Write a claimed proposal in one statement, which is its own transaction: `events`
    are `proposed` and `claimed` (and `reserved` with `reserve`, the ledger reservation's
    parameters, for an effect). Returns the entry's generation for an effect (0 for a read),
    or None when the key is live and nothing was written. `unflushed`: the commit does not
    wait for the WAL to reach the disk (a read only)."""
    params = {f"{name}_row": rows.record(event) for name, event in events.items()}
    params |= {"action_row": rows.record(action), "attempt_row": rows.record(attempt)}
    if reserve is None:
        sql = READ_CLAIMED.format(
            attempt_columns=_attempt_columns(), unflushed=UNFLUSHED if unflushed else ""
        )
    else:
        assert not unflushed, "an effect's intent is on disk before its call"
        sql = EFFECT_CLAIMED.format(attempt_columns=_attempt_columns())
        params |= reserve
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    generation, attempt.pk = (0, row[0]) if reserve is None else row
    for obj in (action, attempt):
        obj._state.adding, obj._state.db = False, connection.alias
    return generation
