"""The read layer: one selector per read, shared by the API and the console.

- The hot-path reads (`runs.selectors.action_view`, `propose_lookup`) build the action's API
  resource from one SQL statement; it must equal the ORM presenter's output, attempts and
  reconciliation reads included.
- The open queue: the API's `GET /queue` and the console's queue page return the same rows,
  in the same order, for the same viewer and filters.
"""

import re
import uuid

from django.test import Client
from django.utils import timezone

from core.access import token_lookup
from core.models import hash_token
from runs import presenters
from runs.models import Action
from runs.selectors import NOTHING_FOUND, action_view, propose_lookup, token_propose_lookup
from tests.builders import (
    PASSWORD,
    make_awaiting,
    make_needs_human,
    make_unknown,
    make_world,
    start_run,
)


def test_the_one_statement_action_view_equals_the_orm_presenter(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)  # an attempt (unknown) and a read (mismatch)
    fresh = Action.objects.select_related("tenant", "principal", "tool", "claimed_by").get(
        pk=action.pk
    )
    expected = presenters.action_dict(fresh)
    assert expected["attempts"] and expected["reconciliations"]
    _, resource = action_view(action.pk, tenant_id=world.tenant.pk)
    assert resource == expected

    hit = propose_lookup(
        run_id=action.run_id,
        principal=world.principal,
        tool_name=action.tool.name,
        key=action.idempotency_key,
    )
    assert hit.resource == expected
    assert action_view(action.pk, tenant_id=world.other_tenant.pk) is None  # not in scope


def test_the_token_and_the_proposal_read_together_are_each_read_alone(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    now = timezone.now()
    agent, admin = hash_token(world.agent.token), hash_token(world.admin.token)
    principal = token_lookup(agent, now).principal
    run, tool, key = action.run_id, action.tool.name, action.idempotency_key
    cases = [
        (run, tool, key),  # a hit: the action and its resource
        (run, tool, "a-key-nobody-used"),
        (run, "no-such-tool", key),
        (uuid.uuid4(), tool, key),  # no such run
    ]
    for run_id, name, key_ in cases:
        token, found = token_propose_lookup(agent, now, run_id=run_id, tool_name=name, key=key_)
        assert token == token_lookup(agent, now) and token.principal == principal
        assert token.principal.tenant == principal.tenant
        alone = propose_lookup(run_id=run_id, principal=principal, tool_name=name, key=key_)
        assert found == alone, (run_id, name, key_)
    assert found == NOTHING_FOUND
    hit = token_propose_lookup(agent, now, run_id=run, tool_name=tool, key=key)[1]
    assert hit.action == action and hit.resource["id"] == str(action.pk)
    # Another principal's token finds nothing of this run; an operator's reads no proposal.
    other = hash_token(world.other_agent.token)
    assert token_propose_lookup(other, now, run_id=run, tool_name=tool, key=key)[1] == NOTHING_FOUND
    token, found = token_propose_lookup(admin, now, run_id=run, tool_name=tool, key=key)
    assert token.user_id is not None and token.principal is None and found is None
    gone = hash_token("no-such-token")
    assert token_propose_lookup(gone, now, run_id=run, tool_name=tool, key=key) == (None, None)


def test_the_api_and_the_console_show_the_same_queue(live_db, downstream):
    world = make_world(downstream)
    run = start_run(world)
    made = [
        make_needs_human(world, run=run),
        make_unknown(world, run=run),
        make_needs_human(world, run=run),
        make_awaiting(world, run=run),
    ]
    console = Client()
    assert console.login(username=world.admin.username, password=PASSWORD)
    api = world.admin.client()

    def api_rows(query):
        body = api.get(f"/api/v1/queue?order=oldest&{query}").json()
        return [row["id"] for row in body["results"]]

    def console_rows(query):
        page = console.get(f"/?{query}").content.decode()
        return re.findall(r'id="row-([0-9a-f-]{36})"', page)

    # The console's queue is what on-call acts on unless its state filter asks for approval
    # requests; the API's holds every open state by default.
    for api_query, console_query in [
        ("state=unknown,needs_human,blocked", ""),
        ("state=awaiting_approval", "state=awaiting_approval"),
        ("state=needs_human", "state=needs_human"),
        ("state=unknown", "state=unknown"),
        ("state=unknown,needs_human,blocked&tool=send_email", "tool=send_email"),
        ("state=awaiting_approval&tool=send_email", "state=awaiting_approval&tool=send_email"),
        ("state=needs_human&tool=update_ticket", "state=needs_human&tool=update_ticket"),
    ]:
        rows = api_rows(api_query)
        assert rows == console_rows(console_query), api_query
    assert set(api_rows("")) == {str(a.pk) for a in made}
