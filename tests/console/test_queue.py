"""The queue page: oldest first, keyset pages, filters, counts, a constant number of queries,
and a refresh that answers 204 when nothing changed."""

import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone

from console import counts, selectors
from runs import decisions
from runs.models import Action
from tests.builders import make_world
from tests.console.conftest import (
    make_blocked,
    make_needs_human,
    make_unknown,
    operator_actor,
    start_run,
    user,
)

ROW = re.compile(r'data-action="([0-9a-f-]{36})"')


def signed_in(persona) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=persona.username))
    client.get("/")  # the first visit stores the working tenant in the session
    return client


def row_ids(response) -> list[str]:
    return ROW.findall(response.content.decode())


def awaiting_many(world, n, run=None):
    """Queue rows: blocked actions (on-call acknowledges them)."""
    run = run or start_run(world)
    return [make_blocked(world, run=run) for _ in range(n)]


def queue_queries(client, django_assert_num_queries, expected):
    with django_assert_num_queries(expected):
        response = client.get("/")
    assert response.status_code == 200
    return response


# The queue costs this many queries whatever the number of rows: session, user, memberships,
# the tools for the filter, the counts, the rows (with their joins and subqueries). The
# navigation's on-call count is the unfiltered page's own total (an on-call person's count of
# pending approvals would be one more query).
QUEUE_QUERIES = 6


def test_queue_with_fifty_rows_runs_a_constant_number_of_queries(
    live_db, downstream, django_assert_num_queries
):
    world = make_world(downstream)
    oncall = signed_in(world.oncall)
    awaiting_many(world, 2)
    held = [make_needs_human(world), make_unknown(world)]
    few = queue_queries(oncall, django_assert_num_queries, QUEUE_QUERIES)
    assert len(row_ids(few)) == 4

    awaiting_many(world, 46)
    for action in held:  # claim holders are joined, not fetched one by one
        decisions.action_claim_for_operator(
            action, user=user(world.oncall), actor=operator_actor(world.oncall)
        )
    full = queue_queries(oncall, django_assert_num_queries, QUEUE_QUERIES)
    assert len(row_ids(full)) == 50

    make_blocked(world)  # the 51st goes to the next page; the first page costs the same
    assert len(row_ids(queue_queries(oncall, django_assert_num_queries, QUEUE_QUERIES))) == 50


def test_counts_past_the_cap_read_as_at_least(live_db, downstream, monkeypatch):
    """Counting every open action on every view costs more than the number tells a person:
    past the cap the queue's counts and the navigation's read "N+"."""
    monkeypatch.setattr(counts, "COUNT_CAP", 3)
    world = make_world(downstream)
    awaiting_many(world, 5)
    make_needs_human(world)
    page = signed_in(world.oncall).get("/").content.decode()
    assert re.search(r'data-count="blocked">3\+<', page)
    assert re.search(r'data-count="needs_human">1<', page)
    assert re.search(r'data-count="total">4\+<', page)
    assert re.search(r'id="nav-count-queue" data-title-count="3"', page)
    assert re.search(r"</span>3\+<span class=\"visually-hidden\"> to act on", page)


NAV_QUEUE = re.compile(r'id="nav-count-queue" data-title-count="(\d+)">(.*?)</span>\s*</a>')


@pytest.mark.parametrize("cap", [3, 1000])
def test_the_navigation_count_is_the_same_whether_the_page_holds_it_or_not(
    live_db, downstream, monkeypatch, cap
):
    """Unfiltered, the queue's own counts give the navigation's on-call count; filtered by
    tool, the navigation counts for itself. Both read the same, past the cap too."""
    monkeypatch.setattr(counts, "COUNT_CAP", cap)
    world = make_world(downstream)
    awaiting_many(world, 2)
    make_needs_human(world)
    make_unknown(world)
    client = signed_in(world.oncall)
    held = NAV_QUEUE.search(client.get("/").content.decode()).groups()
    counted = NAV_QUEUE.search(client.get("/?tool=send_email").content.decode()).groups()
    assert held == counted
    assert held[0] == ("3" if cap == 3 else "4")
    assert ("3+" if cap == 3 else ">4<") in held[1]


def test_queue_is_oldest_first_and_pages_by_keyset_without_gaps_or_repeats(live_db, downstream):
    world = make_world(downstream)
    created = [str(a.pk) for a in awaiting_many(world, 120)]
    client = signed_in(world.approver)
    seen, url = [], "/"
    for _ in range(4):
        response = client.get(url)
        seen += row_ids(response)
        more = re.search(r'href="\?([^"]*after=[^"]+)"[^>]*>Next 50', response.content.decode())
        if not more:
            break
        url = "/?" + more.group(1).replace("&amp;", "&")
        assert "offset" not in url.lower() and "page=" not in url
    assert seen == created  # every action once, oldest first
    assert len(seen) == 120


def test_queue_filters_by_tool_state_age_and_tenant(live_db, downstream):
    world = make_world(downstream)
    run = start_run(world)
    email = make_blocked(world, run=run)
    needs = make_needs_human(world, run=run)
    with time_machine.travel(timezone.now() - timedelta(hours=2), tick=True):
        old = make_blocked(world, run=run)
    client = signed_in(world.admin)

    assert set(row_ids(client.get("/?tool=update_ticket"))) == {str(needs.pk)}
    assert set(row_ids(client.get("/?tool=send_email"))) == {str(email.pk), str(old.pk)}
    assert set(row_ids(client.get("/?state=needs_human"))) == {str(needs.pk)}
    assert row_ids(client.get("/?age=1h")) == [str(old.pk)]
    assert row_ids(client.get("/")) == [str(old.pk), str(email.pk), str(needs.pk)]
    # a bad filter value is ignored, not an error
    assert len(row_ids(client.get("/?state=succeeded&age=forever"))) == 3

    body = client.get("/?tool=send_email").content.decode()
    assert 'data-count="blocked">2<' in body
    assert 'data-count="needs_human">0<' in body


def test_operator_in_two_tenants_can_see_both_queues_at_once(live_db, downstream):
    world = make_world(downstream)
    mine = make_blocked(world)
    other = make_world(downstream)
    theirs = make_blocked(other)
    from core.services import operator_create
    from tests.builders import SETUP

    operator_create(
        tenant=other.tenant, username=world.oncall.username, role="approver", actor=SETUP
    )
    client = signed_in(world.oncall)
    client.post("/tenant/", {"tenant": world.tenant.slug})
    assert row_ids(client.get("/")) == [str(mine.pk)]
    assert row_ids(client.get(f"/?tenant={other.tenant.slug}")) == [str(theirs.pk)]
    assert set(row_ids(client.get("/?tenant=*"))) == {str(mine.pk), str(theirs.pk)}


def test_refresh_answers_204_until_something_changes(live_db, downstream):
    world = make_world(downstream)
    run = start_run(world)
    make_blocked(world, run=run)
    client = signed_in(world.oncall)
    page = client.get("/").content.decode()
    refresh = re.search(r'hx-get="(/\?[^"]*refresh=1[^"]*)"', page).group(1).replace("&amp;", "&")

    unchanged = client.get(refresh, HTTP_HX_REQUEST="true")
    assert unchanged.status_code == 204

    newcomer = make_blocked(world, run=run)
    changed = client.get(refresh, HTTP_HX_REQUEST="true")
    assert changed.status_code == 200
    body = changed.content.decode()
    assert str(newcomer.pk) in body
    assert 'id="queue-region"' in body
    assert 'id="queue-counts"' in body and 'hx-swap-oob="true"' in body
    assert "<html" not in body  # a partial, not the page


def test_the_rows_query_can_use_the_partial_open_queue_index(live_db, downstream):
    world = make_world(downstream)
    filters = selectors.QueueFilters(tenant_ids=[world.tenant.pk])
    qs = selectors.queue_rows_queryset(filters).order_by("created_at", "pk")[:51]
    # On a small table the planner may rightly prefer a scan; what matters is that the
    # query's predicate lets it use the partial index at all (the bench shows it at scale).
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("SET enable_bitmapscan = off")
    try:
        plan = qs.explain()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET enable_seqscan")
            cursor.execute("RESET enable_bitmapscan")
    assert "action_open_queue" in plan


def generic_plan(qs) -> str:
    """The plan PostgreSQL keeps for a prepared statement once it stops planning per call:
    every parameter unknown."""
    sql, params = qs.query.sql_with_params()
    numbers = iter(range(1, len(params) + 1))
    sql = re.sub("%s", lambda _: f"${next(numbers)}", sql)
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("SET enable_bitmapscan = off")
        try:
            cursor.execute("EXPLAIN (GENERIC_PLAN) " + sql)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
            cursor.execute("RESET enable_bitmapscan")


def test_the_queue_can_use_the_partial_index_in_a_generic_plan_too(live_db, downstream):
    # The states are constants in the statement, not parameters: a parameter cannot prove
    # the index's predicate, and a generic plan then reads every action of every tenant.
    world = make_world(downstream)
    filters = selectors.QueueFilters(tenant_ids=[world.tenant.pk])
    # (The counts are the same query unordered: on a small table the planner may rightly
    # count through another index of the tenant's.)
    plan = generic_plan(selectors.queue_rows_queryset(filters).order_by("created_at", "pk")[:51])
    assert "$1" in plan  # generic indeed
    assert "action_open_queue" in plan


@pytest.mark.parametrize("state", ["unknown", "needs_human", "blocked", "awaiting_approval"])
def test_each_open_state_has_a_reason_line(state):
    action = Action(state=state, block_reason="approval_denied" if state == "blocked" else "")
    assert selectors.queue_reason(action)


def test_a_queue_filtered_on_one_state_names_that_state_alone(live_db, downstream):
    # With the open states' IN beside the filter, PostgreSQL cannot read the rows in order
    # from the index on (tenant, state, tool, created_at): it sorted every match for a page.
    world = make_world(downstream)
    filters = selectors.QueueFilters(tenant_ids=[world.tenant.pk], state="needs_human")
    sql = str(selectors.queue_rows_queryset(filters).query)
    assert "IN ('needs_human')" in sql
    assert "'blocked'" not in sql and "'unknown'" not in sql
