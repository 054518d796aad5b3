"""Console behaviour through the plain test client: every page works without JavaScript, and
every button calls the real service."""

import csv
import io
import json
import re

from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from approvals.models import Approval, ApprovalRequest
from core.models import AuditEvent, Role
from core.services import operator_create
from runs import decisions, runtime
from runs.engine import dispatch
from runs.models import Action, Replay, Run
from tests.builders import SETUP, make_world
from tests.console.conftest import (
    add_operator,
    agent_of,
    make_awaiting,
    make_failed_run_with_tools,
    make_failed_run_without_tools,
    make_needs_human,
    operator_actor,
    start_run,
    user,
    wait_state,
)


def signed_in(persona) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=persona.username))
    return client


def text(response) -> str:
    return response.content.decode()


def csv_rows(response) -> list[dict]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


# --- sign-in and scope ----------------------------------------------------------------------


def test_sign_in_lands_on_the_queue_and_sign_out_ends_the_session(live_db):
    world = make_world()
    client = Client()
    response = client.post(
        "/login/", {"username": world.oncall.username, "password": "correct horse"}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/"
    assert world.oncall.username in text(response) and world.tenant.slug in text(response)
    assert client.post("/logout/").status_code == 302
    assert client.get("/")["Location"].startswith("/login/")


def test_tenant_switcher_stores_the_slug_that_the_api_session_reads_too(live_db):
    world = make_world()
    other = make_world()
    operator_create(
        tenant=other.tenant, username=world.oncall.username, role=Role.APPROVER, actor=SETUP
    )
    client = signed_in(world.oncall)
    client.get("/")
    target = other.tenant.slug
    response = client.post("/tenant/", {"tenant": target, "next": "/runs/"})
    assert response.status_code == 303 and response["Location"] == "/runs/"
    assert client.session["tenant"] == target
    page = text(client.get("/"))
    assert f'<option value="{target}" selected>' in page
    me = client.get("/api/v1/me").json()
    assert me["tenant"] == target and me["roles"] == ["approver"]
    # the role follows the tenant: an approver there sees the approvals inbox
    assert client.get("/approvals/").status_code == 200
    client.post("/tenant/", {"tenant": world.tenant.slug})
    assert client.get("/approvals/").status_code == 403


def test_an_off_site_next_is_ignored(live_db):
    world = make_world()
    client = signed_in(world.oncall)
    response = client.post("/tenant/", {"tenant": world.tenant.slug, "next": "https://evil.test/"})
    assert response["Location"] == "/"


# --- the action page ----------------------------------------------------------------------


def test_action_page_shows_intent_diff_and_timeline(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    page = text(signed_in(world.oncall).get(f"/actions/{action.pk}/"))
    # the intent
    for part in (action.target, action.idempotency_key, "update_ticket", world.tenant.slug):
        assert part in page
    # the diff: status differs (highlighted with text, not only colour), priority is equal
    status_row = re.search(
        r'<tr class="is-diff" data-field="status" data-match="no">.*?</tr>', page, re.S
    )
    assert status_row and "differs" in status_row.group(0) and "<mark>" in status_row.group(0)
    assert re.search(r'data-field="priority" data-match="yes">.*?equal', page, re.S)
    assert re.search(
        r'data-field="version" data-match="no">.*?unchanged: no write landed', page, re.S
    )
    assert "1 of 2 fields differ" in page
    # the timeline: proposal, the attempt with its classification and HTTP status, the read
    for event in (
        "Proposed",
        "Dispatch attempt 1: unknown (HTTP 503)",
        "Reconciliation read: differs from the desired state",
        "Handed to a person",
    ):
        assert event in page


def test_timeline_of_an_approved_action_shows_the_approval_requested_granted_and_consumed(
    live_db, downstream
):
    world = make_world(downstream)
    action = make_awaiting(world)
    client = signed_in(world.approver)
    client.post(f"/approvals/{action.approval_request_id}/grant/", {"ttl_seconds": "900"})
    dispatch.action_dispatch(action.pk)
    wait_state(action.pk, "succeeded")
    page = text(client.get(f"/actions/{action.pk}/"))
    for event in (
        "Approval requested",
        "Approval request granted",
        "Approval granted",
        "Approval consumed",
        "Dispatch attempt 1: applied (HTTP 200)",
        "Succeeded",
    ):
        assert event in page, event


def test_resolve_needs_a_reason(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    client = signed_in(world.oncall)
    url = f"/actions/{action.pk}/resolve/"
    # Without JavaScript: Post/Redirect/Get back to the action page, the error on it, and a
    # reload of that page is a plain GET (no 405 on the POST URL, no error twice).
    plain = client.post(url, {"outcome": "succeeded", "reason": "  "})
    assert plain.status_code == 303 and plain["Location"] == f"/actions/{action.pk}/#resolve-form"
    page = client.get(plain["Location"])
    assert page.status_code == 200 and "Say why" in text(page)
    assert "Say why" not in text(client.get(f"/actions/{action.pk}/"))
    htmx = client.post(url, {"outcome": "failed", "reason": ""}, HTTP_HX_REQUEST="true")
    assert htmx.status_code == 422
    assert 'id="resolve-form"' in text(htmx) and "<html" not in text(htmx)
    assert Action.objects.get(pk=action.pk).state == "needs_human"


def test_resolve_with_a_reason_settles_the_action_and_audits_who_and_why(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    client = signed_in(world.oncall)
    response = client.post(
        f"/actions/{action.pk}/resolve/",
        {"outcome": "failed", "reason": "Ticket still open in the helpdesk UI."},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert json.loads(response["HX-Location"])["path"] == f"/actions/{action.pk}/"
    action.refresh_from_db()
    assert (action.state, action.resolution) == ("failed", "resolved_by_operator")
    event = AuditEvent.objects.get(object_id=str(action.pk), verb="action.failed")
    assert (event.actor_kind, event.actor_name) == ("operator", world.oncall.username)
    assert event.reason == "Ticket still open in the helpdesk UI."
    page = text(client.get(f"/actions/{action.pk}/"))
    assert "Resolved as failed" in page  # the flash message
    assert "Ticket still open in the helpdesk UI." in page
    assert "Resolve as succeeded" not in page  # nothing left to resolve
    # a second resolve (a stale page) is refused by the service, with a message
    again = client.post(
        f"/actions/{action.pk}/resolve/", {"outcome": "succeeded", "reason": "x"}, follow=True
    )
    assert "Only an unknown or needs_human action can be resolved" in text(again)
    assert Action.objects.get(pk=action.pk).state == "failed"


def test_claim_is_seen_by_a_second_oncall_who_must_override_to_resolve(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    second = add_operator(world, "oncall2", Role.ONCALL)
    first_client, second_client = signed_in(world.oncall), signed_in(second)

    first_client.post(f"/actions/{action.pk}/claim/")
    assert Action.objects.get(pk=action.pk).claimed_by.username == world.oncall.username
    page = text(second_client.get(f"/actions/{action.pk}/"))
    assert f"Claimed by <strong>{world.oncall.username}</strong>" in page
    assert ">Claim<" not in page
    queue = text(second_client.get("/"))
    assert f'<span class="claim">{world.oncall.username}</span>' in queue

    lost = second_client.post(f"/actions/{action.pk}/claim/", follow=True)
    assert f"{world.oncall.username} claimed this action first" in text(lost)
    refused = second_client.post(
        f"/actions/{action.pk}/resolve/",
        {"outcome": "succeeded", "reason": "looks done"},
        follow=True,
    )
    assert refused.redirect_chain[-1][1] == 303 and "Tick the box" in text(refused)
    assert "looks done</textarea>" in text(refused)  # what was typed comes back
    assert Action.objects.get(pk=action.pk).state == "needs_human"
    second_client.post(
        f"/actions/{action.pk}/resolve/",
        {"outcome": "succeeded", "reason": "looks done", "override_claim": "on"},
    )
    assert Action.objects.get(pk=action.pk).state == "succeeded"


def test_a_second_oncall_can_take_over_an_abandoned_claim(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    second = add_operator(world, "oncall2", Role.ONCALL)
    signed_in(world.oncall).post(f"/actions/{action.pk}/claim/")
    holder_id = Action.objects.get(pk=action.pk).claimed_by_id
    second_client = signed_in(second)
    page = text(second_client.get(f"/actions/{action.pk}/"))
    assert f"Take over from {world.oncall.username}" in page

    taken = second_client.post(
        f"/actions/{action.pk}/claim/", {"take_over_from": holder_id}, follow=True
    )
    assert f"You took this action over from {world.oncall.username}" in text(taken)
    assert Action.objects.get(pk=action.pk).claimed_by.username == second.username
    event = AuditEvent.objects.get(object_id=str(action.pk), verb="action.claim_take_over")
    assert event.before == {"claimed_by": world.oncall.username}
    # A stale take-over (the claim moved on meanwhile) wins nothing.
    stale = signed_in(world.oncall).post(
        f"/actions/{action.pk}/claim/", {"take_over_from": holder_id}, follow=True
    )
    assert f"{second.username} claimed this action first" in text(stale)
    assert Action.objects.get(pk=action.pk).claimed_by.username == second.username


def test_release_gives_the_claim_back(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    client = signed_in(world.oncall)
    client.post(f"/actions/{action.pk}/claim/")
    client.post(f"/actions/{action.pk}/release/")
    assert Action.objects.get(pk=action.pk).claimed_by_id is None
    assert AuditEvent.objects.filter(object_id=str(action.pk), verb="action.release").exists()


def test_recheck_reads_the_authoritative_state_again(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    mine = {"kind": "operator", "name": world.oncall.username}
    assert not action.reconciliations.filter(actor=mine).exists()
    client = signed_in(world.oncall)
    response = client.post(f"/actions/{action.pk}/recheck/", follow=True)
    assert "Re-checked the authoritative state: differs from the desired state" in text(response)
    read = action.reconciliations.get(actor=mine)
    assert read.verdict == "mismatch" and read.diff[0]["field"] == "status"
    assert Action.objects.get(pk=action.pk).state == "needs_human"  # the person decides


def test_action_live_poll_is_204_until_the_action_changes(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    client = signed_in(world.oncall)
    page = text(client.get(f"/actions/{action.pk}/"))
    poll = re.search(r'hx-get="([^"]*live=1[^"]*)"', page).group(1).replace("&amp;", "&")
    assert client.get(poll, HTTP_HX_REQUEST="true").status_code == 204
    decisions.action_resolve(
        action, outcome="succeeded", reason="r", actor=operator_actor(world.admin)
    )
    changed = client.get(poll, HTTP_HX_REQUEST="true")
    assert changed.status_code == 200
    body = text(changed)
    assert 'id="action-live"' in body and "succeeded" in body
    assert 'id="action-controls"' in body and 'hx-swap-oob="true"' in body  # the buttons too
    assert "hx-trigger" not in body.split('id="action-controls"')[0]  # settled: polling stops


# --- approvals -------------------------------------------------------------------------------


def test_inbox_shows_the_binding_and_grant_queues_the_action(live_db, downstream):
    world = make_world(downstream)
    action = make_awaiting(world)
    client = signed_in(world.approver)
    inbox = text(client.get("/approvals/"))
    for part in (action.target, "send_email", "Refund", "Your refund is on its way.", "agent"):
        assert part in inbox
    response = client.post(
        f"/approvals/{action.approval_request_id}/grant/", {"ttl_seconds": "900"}, follow=True
    )
    assert "The action is queued for dispatch" in text(response)
    action.refresh_from_db()
    assert action.state in {"queued", "dispatching", "succeeded"}
    approval = Approval.objects.get(request_id=action.approval_request_id)
    assert 890 <= (approval.expires_at - approval.granted_at).total_seconds() <= 900
    assert approval.granted_by == {"kind": "operator", "name": world.approver.username}
    assert "Recent decisions" in text(response) and "granted" in text(response)


def test_a_request_decided_meanwhile_cannot_be_granted(live_db, downstream):
    world = make_world(downstream)
    action = make_awaiting(world)
    decisions.approval_request_deny(
        ApprovalRequest.objects.get(pk=action.approval_request_id),
        reason="no",
        actor=operator_actor(world.admin),
    )
    client = signed_in(world.approver)
    response = client.post(
        f"/approvals/{action.approval_request_id}/grant/", {"ttl_seconds": "900"}, follow=True
    )
    assert "Not granted: This approval request is already denied." in text(response)
    assert Action.objects.get(pk=action.pk).state == "blocked"
    assert not Approval.objects.filter(request_id=action.approval_request_id).exists()


def test_deny_needs_a_reason_and_blocks_the_action(live_db, downstream):
    world = make_world(downstream)
    action = make_awaiting(world)
    client = signed_in(world.approver)
    url = f"/approvals/{action.approval_request_id}/deny/"
    empty = client.post(url, {"reason": " "}, follow=True)
    assert "a reason is required" in text(empty)
    assert Action.objects.get(pk=action.pk).state == "awaiting_approval"
    client.post(url, {"reason": "Wrong customer."})
    action.refresh_from_db()
    assert (action.state, action.block_reason) == ("blocked", "approval_denied")
    request = ApprovalRequest.objects.get(pk=action.approval_request_id)
    assert request.reason == "Wrong customer."


def test_inbox_poll_is_204_until_a_request_arrives(live_db, downstream):
    world = make_world(downstream)
    run = start_run(world)
    make_awaiting(world, run=run)
    client = signed_in(world.approver)
    page = text(client.get("/approvals/"))
    poll = re.search(r'hx-get="([^"]*poll=1[^"]*)"', page).group(1).replace("&amp;", "&")
    assert client.get(poll, HTTP_HX_REQUEST="true").status_code == 204
    newcomer = make_awaiting(world, run=run)
    body = text(client.get(poll, HTTP_HX_REQUEST="true"))
    assert newcomer.target in body and 'id="pending-region"' in body


# --- runs and replays ------------------------------------------------------------------------


def test_run_page_shows_input_config_tools_and_actions(live_db, downstream):
    world = make_world(downstream)
    upload = SimpleUploadedFile("orders.csv", b"id,total\n1,10\n2,20\n", "text/csv")
    run = runtime.run_start(
        principal=world.principal,
        trigger="webhook",
        config={"batch": 7},
        input_file=upload,
        actor=agent_of(world),
    )
    action = make_needs_human(world, run=run)
    page = text(signed_in(world.oncall).get(f"/runs/{run.pk}/"))
    assert "orders.csv" in page and re.search(r"19\sbytes", page)
    assert run.input_sha256 in page
    assert "&quot;batch&quot;: 7" in page
    assert str(action.pk) in page and "update_ticket" in page
    assert "This run has not settled yet; wait until it finishes." in page  # verdict first
    assert "Replay this run" not in page


def test_replay_allowed_when_no_tool_was_called(live_db):
    world = make_world()
    run = make_failed_run_without_tools(world)
    client = signed_in(world.oncall)
    page = text(client.get(f"/runs/{run.pk}/"))
    assert "No tool was called before this run ended: safe to replay." in page
    assert "Replay this run" in page
    response = client.post(f"/runs/{run.pk}/replay/")
    new_run = Run.objects.get(replay_of=run)
    assert response["Location"] == f"/runs/{new_run.pk}/"
    assert new_run.status == "pending"
    record = Replay.objects.get(new_run=new_run)
    assert record.actor == {"kind": "operator", "name": world.oncall.username}
    assert not record.forced
    # lineage both ways
    assert str(run.pk)[:8] in text(client.get(f"/runs/{new_run.pk}/"))
    assert str(new_run.pk)[:8] in text(client.get(f"/runs/{run.pk}/"))


def test_replay_of_a_run_that_called_tools_is_refused_without_force(live_db, downstream):
    world = make_world(downstream)
    run = make_failed_run_with_tools(world)
    client = signed_in(world.admin)
    page = text(client.get(f"/runs/{run.pk}/"))
    assert "Before failing, this run called update_ticket." in page
    assert "Replay this run" not in page and "Force replay" in page
    response = client.post(f"/runs/{run.pk}/replay/", follow=True)
    assert "Not replayed: Before failing, this run called update_ticket" in text(response)
    assert not Run.objects.filter(replay_of=run).exists()


def test_force_replay_needs_a_reason_and_the_typed_run_id(live_db, downstream):
    world = make_world(downstream)
    run = make_failed_run_with_tools(world)
    client = signed_in(world.admin)
    url = f"/runs/{run.pk}/force-replay/"
    no_reason = client.post(url, {"reason": "", "confirm": str(run.pk)[:8]}, follow=True)
    assert no_reason.redirect_chain == [(f"/runs/{run.pk}/#force-form", 303)]
    assert "Say why" in text(no_reason)
    wrong = client.post(url, {"reason": "ok", "confirm": "deadbeef"}, HTTP_HX_REQUEST="true")
    assert wrong.status_code == 422 and "not this run&#x27;s id" in text(wrong)
    assert 'id="force-form"' in text(wrong) and "ok</textarea>" in text(wrong)  # kept
    assert not Run.objects.filter(replay_of=run).exists()

    client.post(url, {"reason": "Customer asked again.", "confirm": str(run.pk)})
    record = Replay.objects.get(original_run=run)
    assert record.forced and record.reason == "Customer asked again."
    assert record.tools_at_risk == ["update_ticket"]
    history = text(client.get("/replays/"))
    for part in (
        world.admin.username,
        "Customer asked again.",
        str(run.pk)[:8],
        str(record.new_run_id)[:8],
    ):
        assert part in history
    rows = csv_rows(client.get("/replays.csv"))
    assert rows[0]["actor_name"] == world.admin.username
    assert rows[0]["forced"] == "yes" and rows[0]["reason"] == "Customer asked again."
    assert rows[0]["original_run"] == str(run.pk) and rows[0]["new_run"] == str(record.new_run_id)


# --- audit ------------------------------------------------------------------------------------


def test_audit_filters_and_csv_export(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    decisions.action_resolve(
        action,
        outcome="succeeded",
        reason='=HYPERLINK("http://evil")',
        actor=operator_actor(world.oncall),
    )
    client = signed_in(world.admin)
    by_verb = text(client.get("/audit/?verb=action.succeeded"))
    assert 'data-verb="action.succeeded"' in by_verb and 'data-verb="action.propose"' not in by_verb
    prefix = text(client.get("/audit/?verb=action."))
    assert 'data-verb="action.propose"' in prefix and 'data-verb="ledger.reserve"' not in prefix
    by_actor = text(client.get(f"/audit/?actor=operator:{world.oncall.username}"))
    assert (
        'data-verb="action.succeeded"' in by_actor and 'data-verb="action.propose"' not in by_actor
    )
    by_object = text(client.get(f"/audit/?object={action.pk}"))
    assert set(re.findall(r'data-object="([^"]+)"', by_object)) == {str(action.pk)}
    future = text(client.get("/audit/?since=2999-01-01T00:00"))
    assert "No events match." in future
    bad_date = text(client.get("/audit/?verb=action.succeeded&since=yesterday"))
    assert 'role="alert"' in bad_date  # the bad field is reported, the good one still applies
    assert (
        'data-verb="action.succeeded"' in bad_date and 'data-verb="action.propose"' not in bad_date
    )

    rows = csv_rows(client.get(f"/audit.csv?object={action.pk}"))
    assert {r["object_id"] for r in rows} == {str(action.pk)}
    resolved = next(r for r in rows if r["verb"] == "action.succeeded")
    assert resolved["actor_name"] == world.oncall.username
    assert resolved["reason"] == '\'=HYPERLINK("http://evil")'  # not a live formula


def test_audit_shows_only_the_current_tenant(live_db, downstream):
    world = make_world(downstream)
    other = make_world(downstream)
    theirs = make_awaiting(other)
    page = text(signed_in(world.admin).get("/audit/?verb=action.propose"))
    assert str(theirs.pk) not in page


def test_second_oncall_user_helper_works(live_db):
    world = make_world()
    second = add_operator(world, "extra", Role.ONCALL)
    assert user(second).memberships.get().role == Role.ONCALL


def test_django_admin_shows_raw_records_and_the_audit_log_is_read_only(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    User = get_user_model()
    root = User.objects.create_superuser(f"root-{world.tenant.slug}", password="x")
    client = Client()
    client.force_login(root)
    event = AuditEvent.objects.filter(object_id=str(action.pk)).first()
    for url in (
        "/admin/core/auditevent/",
        f"/admin/core/auditevent/{event.pk}/change/",
        "/admin/runs/action/",
        f"/admin/runs/action/{action.pk}/change/",
        "/admin/approvals/approvalrequest/",
        "/admin/ledger/ledgerentry/",
    ):
        assert client.get(url).status_code == 200, url
    assert client.get("/admin/core/auditevent/add/").status_code == 403
    assert client.post(f"/admin/core/auditevent/{event.pk}/delete/").status_code == 403
    change = text(client.get(f"/admin/core/auditevent/{event.pk}/change/"))
    assert 'name="_save"' not in change  # view only


def test_the_500_page_is_styled_names_the_error_id_and_touches_no_database(rf, live_db):
    """A styled 500, with the error id and no internals."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from takeover.errors import server_error

    request = rf.get("/somewhere/")
    with CaptureQueriesContext(connection) as queries:
        try:
            raise RuntimeError("password=hunter2 in the internals")
        except RuntimeError:
            response = server_error(request)
    body = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong" in body and 'href="/static/' in body  # the console's CSS
    assert re.search(r"Error id <code>[\w-]+</code>", body)
    assert "hunter2" not in body and "RuntimeError" not in body  # no internals
    assert len(queries) == 0
