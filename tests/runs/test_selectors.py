"""The read layer: one selector per read, shared by the API and the console.

- The hot-path reads (`runs.selectors.action_view`, `propose_lookup`) build the action's API
  resource from one SQL statement; it must equal the ORM presenter's output, attempts and
  reconciliation reads included.
- The open queue: the API's `GET /queue` and the console's queue page return the same rows,
  in the same order, for the same viewer and filters.
"""

import re

from django.test import Client

from runs import presenters
from runs.models import Action
from runs.selectors import action_view, propose_lookup
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
