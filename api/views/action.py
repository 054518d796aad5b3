"""Proposing an action, reading one (optionally waiting for it to settle), a person's
decisions on it, the queue and the idempotency conflicts, and bulk decisions."""

import time
import uuid

from django.conf import settings
from django.http import Http404
from rest_framework.response import Response

from api import resources, schema, serializers
from api.permissions import require_operator, require_principal
from api.schema import errors_for, ok
from core.errors import ValidationFailed
from core.models import Role, Tool
from runs import decisions, presenters, selectors
from runs.engine.dispatch import claim_for, dispatch_leased
from runs.models import (
    IdempotencyConflict,
)
from runs.propose import action_flush, action_propose
from runs.states import IN_PROGRESS, OPEN_FOR_HUMANS, ActionState
from runs.waits import WaitRefused, waiters, watch

from .common import (
    JSON_NUMBER,
    IdempotencyKeyMissing,
    body_object,
    choice_param,
    csv_param,
    idempotency_key,
    page,
    valid,
)
from .endpoints import decision_endpoint, endpoint, page_endpoint, post_endpoint
from .fast import fast

# --- actions ---------------------------------------------------------------------------

WAIT_PARAMETER = schema.query(
    "wait",
    "Hold the request up to this many seconds (0–30) while the action is queued, "
    "dispatching or unknown. Over the server's cap of concurrent waits it answers "
    "at once with the current state and `Retry-After` (seconds before asking again).",
    {"type": "number", "minimum": 0, "maximum": 30},
)


def _names_read_only_tool(request, principal) -> bool:
    """Whether the body names a tool of this tenant declared read_only. Asked only when the
    Idempotency-Key header is missing, before anything else is validated, so that every
    other proposal without one is the 400 it always was."""
    data = request.data
    name = data.get("tool") if isinstance(data, dict) else None
    return isinstance(name, str) and (
        Tool.objects.filter(tenant_id=principal.tenant_id, name=name, effect="read_only").exists()
    )


_TOOL_FIELD = serializers.ActionProposeIn().fields["tool"]


def _with_proposal(call, pk):
    """Authentication's token lookup with the proposal's in the same statement
    (`selectors.token_propose_lookup`), when the body names a tool under an Idempotency-Key.
    What it found waits on the request for `propose`, which takes it only for the same
    tool and key as it validates."""
    try:
        run_id = uuid.UUID(str(pk))
        key = idempotency_key(call, required=False)
        tool = _TOOL_FIELD.run_validation(body_object(call).get("tool"))
    except Exception:  # whatever it is, the view raises it again after authentication
        return None
    if key is None:
        return None

    def lookup(key_hash, now):
        token, found = selectors.token_propose_lookup(
            key_hash, now, run_id=run_id, tool_name=tool, key=key
        )
        call.found_with_token = (tool, key, found)
        return token

    return lookup


@fast("wait", lookup=_with_proposal)
@endpoint(
    "POST",
    "actions_propose",
    ok(201, resources.ActionOut, "A new action; its `state` and `block_reason` tell the rest."),
    ok(200, resources.ActionOut, "A ledger hit: the existing action, `replayed: true`."),
    errors_for(
        404,
        409,
        411,
        413,
        415,
        422,
        slugs={400: ["validation-error", "idempotency-key-missing"], 409: ["run-not-running"]},
    ),
    request=serializers.ActionProposeIn,
    parameters=[schema.IDEMPOTENCY_KEY, WAIT_PARAMETER],
)
def propose(request, pk):
    principal = require_principal(request)
    seconds = wait_seconds(request)  # before anything is written
    # A side-effecting proposal must carry a key (README, "Idempotency keys"). A read_only
    # tool's may omit it: a read takes no ledger key space (runs.propose._read_action_create).
    key = idempotency_key(
        request,
        required="Idempotency-Key" in request.headers
        or not _names_read_only_tool(request, principal),
    )
    fields = valid(serializers.ActionProposeIn, body_object(request))
    # One read: the run, the tool and the key's live entry with its action (read with the
    # token when the request came by `fast`). A ledger hit is answered from it without
    # another query and without writing anything.
    read = getattr(request, "found_with_token", None)
    if read is not None and read[:2] == (fields["tool"], key):  # a principal's: read[2] is set
        found = read[2]
    else:
        found = selectors.propose_lookup(
            run_id=pk, principal=principal, tool_name=fields["tool"], key=key
        )
    if found.run is None:
        raise Http404
    if found.tool is None:
        raise ValidationFailed(
            "Unknown tool.", {"tool": [f"No tool named {fields['tool']!r} in this tenant."]}
        )
    if key is None and found.tool.effect != "read_only":  # re-declared since the peek above
        raise IdempotencyKeyMissing()
    deadline = time.monotonic() + seconds
    early = Early.listen(request, seconds)
    # Waiting at least as long as the whole dispatch can take, the request is its own
    # worker: it leases the new action to itself as it proposes it (runs/claim.py).
    claim = claim_for(found.tool, seconds) if early is not None else {}
    try:
        action, created, changed = action_propose(
            run=found.run,
            tool=found.tool,
            target=fields["target"],
            desired_state=fields["desired_state"],
            expected_version=fields["expected_version"],
            idempotency_key=key,
            approval_id=fields["approval_id"],
            reason=(fields.get("reason") or "").strip(),
            actor=request.user.actor,
            known=found,
            action_id=early and early.action_id,
            unflushed=early is not None,  # it answers after a flushed commit, or flushes
            **claim,
        )
        if created and action.state == ActionState.DISPATCHING:  # claimed: dispatch it
            resource = _dispatched_here(action, principal, found.tool)
        elif created:
            resource = presenters.action_resource(
                action,
                tenant=principal.tenant.slug,
                principal=principal.name,
                tool=found.tool.name,
                claimed_by=None,
                attempts=[],
                reconciliations=[],
            )
        elif found.action is not None and action.pk == found.action.pk:
            resource = found.resource
        else:  # lost a race for a new key: the winner's action, read now
            action, resource = selectors.action_view(action.pk)
        if seconds and resource["state"] in IN_PROGRESS:
            # Propose and await the outcome in one request: the same wait as GET ?wait=.
            # (A ledger hit's action was there before this request listened.)
            ours = early if early and action.pk == early.action_id else None
            if early and not ours:
                early.close()  # its slot, before the wait takes one of its own
            known = (action, resource)
            left = max(0.0, deadline - time.monotonic())
            resource = dict(wait_for_settle(request, action.pk, left, known, early=ours)[1])
        if resource["state"] == ActionState.QUEUED and (early or not created):
            # Still queued: no lease has flushed its proposal (ours, or a racer's) to disk.
            action_flush(action.pk)
    finally:
        if early:
            early.close()
    resource["replayed"], resource["content_changed"] = not created, changed
    return waited(request, Response(resource, status=201 if created else 200))


def _dispatched_here(action, principal, tool) -> dict:
    """Dispatch a proposal this request claimed, and the action's resource after it: as
    settled in memory when its first attempt settled it for good (the rows say no more than
    that), else read again (a safe retry, an unknown outcome, a lease the sweeper took)."""
    attempt = action.claimed_attempt
    settled = dispatch_leased(action, attempt)
    if settled not in {ActionState.SUCCEEDED, ActionState.FAILED} or attempt.finished_at is None:
        return selectors.action_view(action.pk)[1]
    return presenters.action_resource(
        action,
        tenant=principal.tenant.slug,
        principal=principal.name,
        tool=tool.name,
        claimed_by=None,
        attempts=[presenters.attempt_dict(attempt)],
        reconciliations=[],
    )


def wait_seconds(request) -> float:
    """`?wait=N`: a JSON number of seconds from 0 to ACTION_WAIT_MAX_SECONDS (0 when absent)."""
    wait = request.query_params.get("wait")
    if wait is None:
        return 0.0
    # A JSON number (what the schema's `number` means); float() alone would also take
    # "1_0", "nan", " 5".
    if len(wait) <= 32 and JSON_NUMBER.fullmatch(wait):
        seconds = float(wait)
        if 0 <= seconds <= settings.ACTION_WAIT_MAX_SECONDS:
            return seconds
    raise ValidationFailed("Bad wait.", {"wait": ["A number of seconds from 0 to 30."]})


def waited(request, response):
    if getattr(request, "wait_refused", False):
        # Over the cap of concurrent waits: answered at once; ask again in a second.
        response["Retry-After"] = "1"
    return response


class Early:
    """A proposal that will wait listens for its action before the action exists: under
    an id of its own choosing, registered before the proposal commits, so no settle can
    come unheard and no read is needed to check for one (`wait_for_settle`)."""

    def __init__(self, key) -> None:
        self.action_id, self.key = uuid.uuid4(), key
        self.event = waiters.register(self.action_id, key)

    @classmethod
    def listen(cls, request, seconds: float) -> "Early | None":
        if not seconds:
            return None
        try:
            return cls(_wait_key(request.user))
        except WaitRefused:
            return None  # `wait_for_settle` is refused in turn, and says so

    def close(self) -> None:
        if self.event is not None:
            waiters.unregister(self.action_id, self.key, self.event)
            self.event = None


def _wait_key(caller):
    return ("principal", caller.principal.pk) if caller.is_principal else ("user", caller.user.pk)


def wait_for_settle(request, pk, seconds: float, known=None, early: Early | None = None):
    """The action, held until it leaves the in-progress states or `seconds` pass.

    No poll loop: the request sleeps on an event that the process's LISTEN thread sets when
    the action's settling transaction commits (`runs.waits`). It listens before it reads,
    and marks an action that its proposer claimed (`watch`, which reads its state too), so
    a settle in between is seen. `known` is a view this request read before it listened (a
    proposal's answer): the mark reads the state again, and the whole view is read again only
    if it moved; `early`, registered before the action was written, needs neither unless its
    request claimed the action (its caller closes it). Over the per-principal or
    per-process cap it answers at once with the current state."""
    caller = request.user
    key = _wait_key(caller)
    try:
        event = early.event if early else waiters.register(pk, key)
    except WaitRefused:
        view = known or action_view_for(caller, pk)
        request.wait_refused = view[0].state in IN_PROGRESS
        return view
    try:
        deadline = time.monotonic() + seconds
        view = known or action_view_for(caller, pk)  # one it cannot see is a 404 first
        # A view read (or written) after this request listened, of a watched action, is the
        # one to wait on. Otherwise the action is marked, so that its settle is announced
        # (runs.waits), and the state as of the mark says whether the view is still current.
        heard = (early or known is None) and view[0].watched is not False
        if view[0].state in IN_PROGRESS and not heard and watch(pk) != view[0].state:
            view = action_view_for(caller, pk)
        while view[0].state in IN_PROGRESS:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not event.wait(remaining):
                break
            event.clear()
            view = action_view_for(caller, pk)
    finally:
        if not early:
            waiters.unregister(pk, key, event)
    return view


def action_view_for(caller, pk):
    if caller.is_principal:
        view = selectors.action_view(pk, principal_id=caller.principal.pk)
    else:
        view = selectors.action_view(pk, tenant_id=caller.tenant.pk)
    if view is None:
        raise Http404
    return view


@fast("wait")
@endpoint(
    "GET",
    "actions_retrieve",
    ok(200, resources.ActionOut, "The action; with `Retry-After` when a wait was refused."),
    errors_for(404),
    parameters=[WAIT_PARAMETER],
)
def action_detail(request, pk):
    try:
        seconds = wait_seconds(request)
    except ValidationFailed:
        action_view_for(request.user, pk)  # an action it cannot see is a 404 first
        raise
    if seconds:
        view = wait_for_settle(request, pk, seconds)
    else:
        view = action_view_for(request.user, pk)
    return waited(request, Response(view[1]))


@decision_endpoint("actions_reconcile", resources.ActionOut, None)
def action_reconcile(request, pk):
    require_operator(request, Role.ONCALL)
    action = selectors.action_for(request.user, pk, with_history=True)
    decisions.action_recheck(action.pk, actor=request.user.actor)
    return Response(
        presenters.action_dict(selectors.action_for(request.user, pk, with_history=True))
    )


@decision_endpoint("actions_resolve", resources.ActionOut, serializers.ResolveIn)
def action_resolve(request, pk):
    require_operator(request, Role.ONCALL)
    action = selectors.action_for(request.user, pk, with_history=True)
    fields = valid(serializers.ResolveIn, body_object(request))
    decisions.action_resolve(
        action,
        outcome=fields["outcome"],
        reason=fields["reason"],
        actor=request.user.actor,
        based_on_read=fields["based_on_read"],
        take_over=fields["take_over"],
    )
    return Response(
        presenters.action_dict(selectors.action_for(request.user, pk, with_history=True))
    )


@decision_endpoint(None, resources.ActionOut, serializers.AcknowledgeIn)
def action_acknowledge(request, pk):
    """Acknowledge a blocked action (on-call): it leaves the queue, stays findable. 409
    `state-conflict` unless it is blocked and not yet acknowledged."""
    require_operator(request, Role.ONCALL)
    action = selectors.action_for(request.user, pk, with_history=True)
    fields = valid(serializers.AcknowledgeIn, body_object(request) if request.body else {})
    decisions.action_acknowledge(action, note=fields["note"].strip(), actor=request.user.actor)
    return Response(
        presenters.action_dict(selectors.action_for(request.user, pk, with_history=True))
    )


@page_endpoint("idempotency_conflicts_list", resources.IdempotencyConflictOut)
def idempotency_conflicts(request):
    """Every proposal refused with 422 idempotency-conflict, newest first (operators)."""
    caller = require_operator(request)
    qs = IdempotencyConflict.objects.filter(tenant=caller.tenant).select_related("principal")
    return page(
        request,
        qs,
        lambda c: {
            "id": c.pk,
            "at": c.at.isoformat(),
            "principal": c.principal.name,
            "key": c.key,
            "existing_action": str(c.existing_action_id) if c.existing_action_id else None,
            "attempted": c.attempted,
            "request_id": c.request_id,
        },
        field="at",
    )


@page_endpoint(
    "queue_list",
    resources.ActionOut,
    schema.csv_query("state", "Default: all four.", OPEN_FOR_HUMANS),
    schema.csv_query("tool", "Only these tools (names).", pattern=schema.TOOL_NAME),
    schema.query("order", "`oldest` for oldest first (the console's order).", enum=["oldest"]),
)
def queue(request):
    caller = require_operator(request)
    states = csv_param(request, "state", OPEN_FOR_HUMANS) or OPEN_FOR_HUMANS
    # Acknowledged blocked actions have left the queue; GET /actions/{id} still has them.
    tools = csv_param(request, "tool", pattern=schema.TOOL_NAME)
    qs = selectors.open_queue(
        caller.tenant_ids,
        states=states,
        tool_ids=selectors.tool_ids(caller.tenant_ids, tools) if tools else None,
    )
    qs = selectors.with_attempts_and_reads(qs)
    oldest = choice_param(request, "order", ["oldest"]) == "oldest"
    return page(request, qs, presenters.action_dict, newest_first=not oldest)


# --- bulk decisions with a preview -------------------------------------------------------------


def _bulk_args(request, serializer):
    viewer = require_operator(request)
    fields = valid(serializer, body_object(request))
    return (
        viewer,
        {
            "viewer": viewer,
            "operation": fields["operation"],
            "ids": fields["ids"],
            "outcome": fields["outcome"] or "",
            "reason": fields["reason"],
            "force": fields["force"],
        },
        fields,
    )


@post_endpoint("bulk_preview", resources.BulkPlanOut, resources.BulkIn)
def bulk_preview(request):
    """What resolving or re-checking these actions, or replaying these runs, would do, item
    by item, without doing any of it. Items the caller cannot see, or may not act on, are
    in the plan with `will: skip` and the reason."""
    from runs import bulk

    _viewer, args, _ = _bulk_args(request, serializers.BulkIn)
    return Response(bulk.bulk_plan(**args).as_dict())


@post_endpoint("bulk_apply", resources.BulkResultOut, resources.BulkApplyIn, 409)
def bulk_apply(request):
    """Do what the preview with this `signature` said. 409 `state-conflict` (with the new
    `plan`) when the plan is not that one any more: nothing was done. Each decision is
    audited by its own service, and the batch as `bulk.apply`."""
    from runs import bulk

    _viewer, args, fields = _bulk_args(request, serializers.BulkApplyIn)
    plan, results = bulk.bulk_apply(signature=fields["signature"], **args)
    return Response({"plan": plan.as_dict(), "results": [r.as_dict() for r in results]})
