"""HTTP API v1 (docs/design.md, "The API's conventions"). Thin: validate, find the object
in the caller's scope, call a service, present the result. Another tenant's object is always
a 404."""

import re
import time
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import OpenApiRequest, OpenApiResponse, extend_schema
from rest_framework.decorators import api_view, parser_classes
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

import approvals.services
from approvals.models import RequestState
from approvals.selectors import (
    approval_for,
    approval_request_for,
    approval_requests_of,
    approvals_of,
)
from core.api import jsonsafe
from core.api.pagination import keyset_page
from core.api.parsers import StrictJSONParser, refused
from core.api.permissions import require_operator, require_principal
from core.api.problems import problem
from core.errors import StateConflict, ValidationFailed
from core.models import Principal, Role, Tool
from core.selectors import audit_events
from core.services import (
    principal_create,
    tenant_settings_update,
    token_issue,
    token_revoke,
    token_rotate,
    tokens_manageable,
    tool_create,
    tool_declare,
    tool_rotate_secret,
)
from ledger.selectors import ledger_entries_of, ledger_entry_for
from ledger.services import ledger_revoke
from runs import decisions, mcp_tools, replay, runtime, selectors
from runs import presenters as present
from runs.models import (
    ForceReplayRequest,
    IdempotencyConflict,
    Replay,
)
from runs.propose import action_propose
from runs.states import IN_PROGRESS, OPEN_FOR_HUMANS, RunStatus
from runs.waits import WaitRefused, waiters

from . import schema as o
from . import serializers as s
from .schema import errors_for, ok

RUN_409 = {409: ["run-not-running", "state-conflict"]}

# --- helpers ---------------------------------------------------------------------------

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
SF_STRING = re.compile(r'^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$')


def idempotency_key(request, *, required: bool = True) -> str | None:
    """The Idempotency-Key header, bare or as an RFC 8941 sf-string; returned bare. Without
    the header: a 400, or None when not `required` (a read_only tool's proposal)."""
    raw = request.headers.get("Idempotency-Key")
    if raw is None:
        if not required:
            return None
        raise IdempotencyKeyMissing()
    raw = raw.strip()
    if quoted := SF_STRING.match(raw):
        raw = re.sub(r"\\([\"\\])", r"\1", quoted.group(1))
    if not IDEMPOTENCY_KEY.match(raw):
        raise ValidationFailed(
            "The Idempotency-Key header is malformed.",
            {"Idempotency-Key": ["1–255 visible ASCII characters, bare or as a quoted string."]},
        )
    return raw


class IdempotencyKeyMissing(ValidationFailed):
    slug = "idempotency-key-missing"
    title = "Idempotency-Key missing"

    def __init__(self):
        super().__init__(
            "A side-effecting request must carry an Idempotency-Key header derived from "
            "stable intent.",
            {"Idempotency-Key": ["This header is required."]},
        )


def valid(serializer_class, data):
    """Validated fields. An optional field sent as null means "not given" (docs/design.md,
    "The API's conventions"), unless the field gives null a meaning of its own (tools_called,
    expected_version, approval_id)."""
    serializer = serializer_class()
    fields = serializer.fields
    # Given as `data=` after construction: one serializer, its fields deep-copied once.
    serializer.initial_data = {
        name: value
        for name, value in data.items()
        if not (
            value is None
            and name in fields
            and not fields[name].required
            and not fields[name].allow_null
        )
    }
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def body_object(request) -> dict:
    data = request.data
    if not isinstance(data, dict):
        raise ValidationFailed(
            "The body must be a JSON object.", {"body": ["Must be a JSON object."]}
        )
    return data


def page(request, qs, present_one=None, *, many=None, newest_first=True, field="created_at"):
    """One keyset page of `qs`, each row presented by `present_one`, or the whole page at
    once by `many` (when a row would otherwise cost a query of its own)."""
    rows, next_cursor = keyset_page(
        qs, request.query_params.get("cursor"), newest_first=newest_first, field=field
    )
    results = many(rows) if many else [present_one(r) for r in rows]
    return Response({"results": results, "next": next_cursor})


def csv_param(request, name, allowed=None, pattern=None) -> list[str]:
    """A comma-separated query parameter (`o.csv_query`): values of `allowed`, or each
    matching `pattern`; `name=` names nothing and is a 400, like any value outside."""
    raw = request.query_params.get(name)
    if raw == "":
        raise ValidationFailed(f"Empty {name}.", {name: ["Name at least one, or leave it out."]})
    values = (raw or "").split(",") if raw else []
    if allowed is not None and (bad := [v for v in values if v not in allowed]):
        raise ValidationFailed(
            f"Unknown {name}.", {name: [f"{', '.join(bad)} not in {', '.join(allowed)}."]}
        )
    if pattern is not None and (bad := [v for v in values if not re.fullmatch(pattern, v)]):
        raise ValidationFailed(f"Bad {name}.", {name: [f"Not a name: {', '.join(bad)}."]})
    return values


JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def choice_param(request, name, allowed) -> str | None:
    """One value of `allowed`, or None when absent; anything else is a 400 naming it."""
    value = request.query_params.get(name)
    if value is not None and value not in allowed:
        raise ValidationFailed(f"Unknown {name}.", {name: [f"One of {', '.join(allowed)}."]})
    return value


# --- who am I ---------------------------------------------------------------------------


@extend_schema(operation_id="me", request=None, responses={**ok(200, o.MeOut), **errors_for()})
@api_view(["GET"])
def me(request):
    caller = request.user
    return Response(
        {
            "kind": caller.kind,
            "name": caller.name,
            "tenant": caller.tenant.slug,
            "roles": caller.roles,
        }
    )


# --- runs ------------------------------------------------------------------------------


@extend_schema(
    methods=["GET"],
    operation_id="runs_list",
    parameters=[o.csv_query("status", "Only runs in these statuses.", RunStatus.values), o.CURSOR],
    responses={**ok(200, o.page_of(o.RunOut)), **errors_for()},
)
@extend_schema(
    methods=["POST"],
    operation_id="runs_start",
    request={
        "application/json": s.RunStartIn,
        "multipart/form-data": OpenApiRequest(o.RunStartMultipartIn, encoding=o.RUN_START_ENCODING),
    },
    responses={**ok(201, o.RunDetailOut), **errors_for(411, 413, 415)},
)
@api_view(["GET", "POST"])
@parser_classes([StrictJSONParser, MultiPartParser])
def runs(request):
    if request.method == "GET":
        qs = selectors.runs_of(request.user)
        if statuses := csv_param(request, "status", RunStatus.values):
            qs = qs.filter(status__in=statuses)
        return page(request, qs, many=selectors.run_resources)
    principal = require_principal(request)
    if request.content_type.startswith("multipart/"):
        for name in ("trigger", "session_id", "config"):
            if name in request.FILES:
                raise ValidationFailed(
                    f"{name} is a file part.",
                    {name: ["Send it as a plain form field; only input_file is a file."]},
                )
        data = {k: request.data.get(k) for k in ("trigger", "session_id") if k in request.data}
        if "config" in request.data:
            try:
                data["config"] = jsonsafe.loads(request.data["config"], field="config")
            except jsonsafe.JSONRefused as exc:
                raise refused(exc) from exc
        if "input_file" in request.FILES:
            data["input_file"] = request.FILES["input_file"]
        fields = valid(s.RunStartUploadIn, data)
    else:
        fields = valid(s.RunStartIn, body_object(request))
    upload = fields.get("input_file")
    if upload is not None and upload.size > settings.MAX_INPUT_FILE_BYTES:
        return problem(
            "payload-too-large",
            "Payload too large",
            413,
            f"input_file is larger than {settings.MAX_INPUT_FILE_BYTES} bytes.",
        )
    run = runtime.run_start(
        principal=principal,
        trigger=fields["trigger"],
        config=fields["config"],
        session_id=fields.get("session_id"),
        input_file=upload,
        actor=request.user.actor,
    )
    return Response(selectors.run_resource(run), status=201)


@extend_schema(
    operation_id="runs_retrieve",
    request=None,
    responses={**ok(200, o.RunDetailOut), **errors_for(404)},
)
@api_view(["GET"])
def run_detail(request, pk):
    return Response(selectors.run_resource(selectors.run_for(request.user, pk)))


@extend_schema(
    operation_id="runs_heartbeat",
    request=None,
    responses={**ok(200, o.RunOut), **errors_for(404, 409, 411, 413, 415, slugs=RUN_409)},
)
@api_view(["POST"])
def run_heartbeat(request, pk):
    require_principal(request)
    run = runtime.run_heartbeat(selectors.run_for(request.user, pk), actor=request.user.actor)
    return Response(selectors.run_resource(run, with_actions=False))


@extend_schema(
    operation_id="runs_finish",
    request=s.RunFinishIn,
    responses={**ok(200, o.RunDetailOut), **errors_for(404, 409, 411, 413, 415, slugs=RUN_409)},
)
@api_view(["POST"])
def run_finish(request, pk):
    require_principal(request)
    run = selectors.run_for(request.user, pk)
    fields = valid(s.RunFinishIn, body_object(request))
    run = runtime.run_finish(run, actor=request.user.actor, **fields)
    return Response(selectors.run_resource(run))


@extend_schema(
    operation_id="runs_claim",
    request=None,
    responses={
        **ok(200, o.RunDetailOut, "The claimed run, now running."),
        204: OpenApiResponse(description="No pending run for this principal."),
        **errors_for(411, 413, 415),
    },
)
@api_view(["POST"])
def run_claim(request):
    principal = require_principal(request)
    run = runtime.run_claim(principal=principal, actor=request.user.actor)
    if run is None:
        return Response(status=204)
    return Response(selectors.run_resource(run))


@extend_schema(
    operation_id="runs_replay",
    request=s.ReplayIn,
    responses={
        **ok(201, o.RunDetailOut, "The new run (pending), for a runtime to claim."),
        **ok(
            202,
            o.ForceReplayRequestOut,
            "With the tenant's four-eyes setting, a force that needs one waits for a "
            "second admin: the waiting force replay request.",
        ),
        **errors_for(404, 409, 410, 411, 413, 415, slugs={409: ["replay-refused"]}),
    },
)
@api_view(["POST"])
def run_replay(request, pk):
    run = selectors.run_for(request.user, pk)
    fields = valid(s.ReplayIn, body_object(request) if request.body else {})
    caller = request.user
    if fields["force"]:
        require_operator(request, Role.ADMIN)
        if not fields["reason"].strip():
            raise ValidationFailed(
                "A forced replay needs a reason.", {"reason": ["Required when force is true."]}
            )
    if fields["force"]:
        new_run, waiting = replay.run_force_replay(
            run, reason=fields["reason"].strip(), actor=caller.actor
        )
        if waiting is not None:
            return Response(present.force_request_dict(waiting), status=202)
    else:
        new_run = replay.run_replay(run, force=False, reason="", actor=caller.actor)
    return Response(selectors.run_resource(new_run), status=201)


FORCE_REQUEST_STATES = ["pending", "confirmed", "rejected"]


@extend_schema(
    operation_id="force_replay_requests_list",
    request=None,
    parameters=[
        o.csv_query("state", "Only requests in these states.", FORCE_REQUEST_STATES),
        o.CURSOR,
    ],
    responses={**ok(200, o.page_of(o.ForceReplayRequestOut)), **errors_for()},
)
@api_view(["GET"])
def force_replay_requests(request):
    """Four-eyes force replays, newest first; `?state=pending` for those waiting. Admin."""
    caller = require_operator(request, Role.ADMIN)
    qs = ForceReplayRequest.objects.filter(tenant=caller.tenant)
    if states := csv_param(request, "state", FORCE_REQUEST_STATES):
        qs = qs.filter(state__in=states)
    return page(request, qs, present.force_request_dict)


@extend_schema(
    request=None,
    responses={**ok(201, o.RunDetailOut), **errors_for(404, 409, slugs={409: ["state-conflict"]})},
)
@api_view(["POST"])
def force_replay_confirm(request, pk):
    """A second admin confirms: 201 with the new run. 409 for the requester themselves."""
    caller = require_operator(request, Role.ADMIN)
    new_run = replay.force_replay_confirm(
        selectors.force_request_for(caller, pk), actor=caller.actor
    )
    return Response(selectors.run_resource(new_run), status=201)


@extend_schema(
    request=s.NoteIn,
    responses={**ok(200, o.ForceReplayRequestOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def force_replay_reject(request, pk):
    caller = require_operator(request, Role.ADMIN)
    fields = valid(s.NoteIn, body_object(request) if request.body else {})
    req = replay.force_replay_reject(
        selectors.force_request_for(caller, pk), reason=fields["reason"].strip(), actor=caller.actor
    )
    return Response(present.force_request_dict(req))


@extend_schema(
    methods=["GET"],
    operation_id="settings_retrieve",
    request=None,
    responses={**ok(200, o.TenantSettingsOut), **errors_for()},
)
@extend_schema(
    methods=["POST"],
    operation_id="settings_update",
    request=s.TenantSettingsIn,
    responses={**ok(200, o.TenantSettingsOut), **errors_for(411, 413, 415)},
)
@api_view(["GET", "POST"])
def tenant_settings(request):
    """The tenant's settings (admin): `four_eyes_force_replay`, `approval_sla_seconds`, and
    the notification thresholds. A POST changes the fields it names."""
    caller = require_operator(request, Role.ADMIN)
    tenant = caller.tenant
    if request.method == "POST":
        fields = valid(s.TenantSettingsIn, body_object(request))
        if fields:
            tenant = tenant_settings_update(tenant, actor=caller.actor, **fields)
    return Response(
        {
            "four_eyes_force_replay": tenant.four_eyes_force_replay,
            "approval_sla_seconds": tenant.approval_sla_seconds,
            "unknown_alert_seconds": tenant.unknown_alert_seconds,
            "approval_expiry_warning_seconds": tenant.approval_expiry_warning_seconds,
        }
    )


@extend_schema(
    operation_id="replays_list",
    request=None,
    parameters=[o.CURSOR],
    responses={**ok(200, o.page_of(o.ReplayOut)), **errors_for()},
)
@api_view(["GET"])
def replays(request):
    caller = require_operator(request, Role.ADMIN)
    qs = Replay.objects.filter(tenant=caller.tenant)
    return page(request, qs, present.replay_record, field="at")


# --- actions ---------------------------------------------------------------------------


def _names_read_only_tool(request, principal) -> bool:
    """Whether the body names a tool of this tenant declared read_only. Asked only when the
    Idempotency-Key header is missing, before anything else is validated, so that every
    other proposal without one is the 400 it always was."""
    data = request.data
    name = data.get("tool") if isinstance(data, dict) else None
    return isinstance(name, str) and (
        Tool.objects.filter(tenant_id=principal.tenant_id, name=name, effect="read_only").exists()
    )


@extend_schema(
    operation_id="actions_propose",
    request=s.ActionProposeIn,
    parameters=[o.IDEMPOTENCY_KEY],
    responses={
        **ok(201, o.ActionOut, "A new action; its `state` and `block_reason` tell the rest."),
        **ok(200, o.ActionOut, "A ledger hit: the existing action, `replayed: true`."),
        **errors_for(
            404,
            409,
            411,
            413,
            415,
            422,
            slugs={400: ["validation-error", "idempotency-key-missing"], 409: ["run-not-running"]},
        ),
    },
)
@api_view(["POST"])
def propose(request, pk):
    principal = require_principal(request)
    # A side-effecting proposal must carry a key (README, "Idempotency keys"). A read_only
    # tool's may omit it: a read takes no ledger key space (runs.propose._read_action_create).
    key = idempotency_key(
        request,
        required="Idempotency-Key" in request.headers
        or not _names_read_only_tool(request, principal),
    )
    fields = valid(s.ActionProposeIn, body_object(request))
    # One read: the run, the tool and the key's live entry with its action. A ledger hit is
    # answered from it without another query and without writing anything.
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
    )
    if created:
        resource = present.action_resource(
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
        resource = selectors.action_view(action.pk)[1]
    resource["replayed"], resource["content_changed"] = not created, changed
    return Response(resource, status=201 if created else 200)


def wait_for_settle(request, view, seconds: float):
    """Hold the request until the action leaves the in-progress states or `seconds` pass.

    No poll loop: the request sleeps on an event that the process's LISTEN thread sets when
    the action's settling transaction commits (`runs.waits`). Over the per-principal or
    per-process cap it answers at once with the current state."""
    caller = request.user
    action, _ = view
    key = ("principal", caller.principal.pk) if caller.is_principal else ("user", caller.user.pk)
    try:
        event = waiters.register(action.pk, key)
    except WaitRefused:
        request.wait_refused = True
        return view
    try:
        deadline = time.monotonic() + seconds
        # Read again now that we listen: a settle between the first read and here is seen.
        view = action_view_for(caller, action.pk)
        while view[0].state in IN_PROGRESS:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not event.wait(remaining):
                break
            event.clear()
            view = action_view_for(caller, action.pk)
    finally:
        waiters.unregister(action.pk, key, event)
    return view


def action_view_for(caller, pk):
    if caller.is_principal:
        view = selectors.action_view(pk, principal_id=caller.principal.pk)
    else:
        view = selectors.action_view(pk, tenant_id=caller.tenant.pk)
    if view is None:
        raise Http404
    return view


@extend_schema(
    operation_id="actions_retrieve",
    request=None,
    parameters=[
        o.query(
            "wait",
            "Hold the request up to this many seconds (0–30) while the action is queued, "
            "dispatching or unknown. Over the server's cap of concurrent waits it answers "
            "at once with the current state and `Retry-After` (seconds before asking again).",
            {"type": "number", "minimum": 0, "maximum": 30},
        )
    ],
    responses={
        **ok(200, o.ActionOut, "The action; with `Retry-After` when a wait was refused."),
        **errors_for(404),
    },
)
@api_view(["GET"])
def action_detail(request, pk):
    view = action_view_for(request.user, pk)
    wait = request.query_params.get("wait")
    if wait is not None:
        try:
            # A JSON number (what the schema's `number` means); float() alone would also
            # take "1_0", "nan", " 5".
            if len(wait) > 32 or not JSON_NUMBER.fullmatch(wait):
                raise ValueError
            seconds = float(wait)
            if not 0 <= seconds <= settings.ACTION_WAIT_MAX_SECONDS:
                raise ValueError
        except ValueError as exc:
            raise ValidationFailed(
                "Bad wait.", {"wait": ["A number of seconds from 0 to 30."]}
            ) from exc
        if seconds and view[0].state in IN_PROGRESS:
            view = wait_for_settle(request, view, seconds)
    response = Response(view[1])
    if getattr(request, "wait_refused", False):
        # Over the cap of concurrent waits: answered at once; ask again in a second.
        response["Retry-After"] = "1"
    return response


@extend_schema(
    operation_id="actions_reconcile",
    request=None,
    responses={**ok(200, o.ActionOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def action_reconcile(request, pk):
    require_operator(request, Role.ONCALL)
    action = selectors.action_for(request.user, pk, with_history=True)
    if action.state not in {"unknown", "needs_human"}:
        raise StateConflict(
            f"Only an unknown or needs_human action can be re-checked; this one is {action.state}."
        )
    decisions.action_recheck(action.pk, actor=request.user.actor)
    return Response(present.action_dict(selectors.action_for(request.user, pk, with_history=True)))


@extend_schema(
    operation_id="actions_resolve",
    request=s.ResolveIn,
    responses={**ok(200, o.ActionOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def action_resolve(request, pk):
    require_operator(request, Role.ONCALL)
    action = selectors.action_for(request.user, pk, with_history=True)
    fields = valid(s.ResolveIn, body_object(request))
    if not fields["reason"].strip():
        raise ValidationFailed("A reason is required.", {"reason": ["Say why."]})
    decisions.action_resolve(
        action,
        outcome=fields["outcome"],
        reason=fields["reason"].strip(),
        actor=request.user.actor,
        based_on_read=fields["based_on_read"],
    )
    return Response(present.action_dict(selectors.action_for(request.user, pk, with_history=True)))


@extend_schema(
    request=s.AcknowledgeIn,
    responses={**ok(200, o.ActionOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def action_acknowledge(request, pk):
    """Acknowledge a blocked action (on-call): it leaves the queue, stays findable. 409
    `state-conflict` unless it is blocked and not yet acknowledged."""
    require_operator(request, Role.ONCALL)
    action = selectors.action_for(request.user, pk, with_history=True)
    fields = valid(s.AcknowledgeIn, body_object(request) if request.body else {})
    decisions.action_acknowledge(action, note=fields["note"].strip(), actor=request.user.actor)
    return Response(present.action_dict(selectors.action_for(request.user, pk, with_history=True)))


@extend_schema(
    operation_id="idempotency_conflicts_list",
    request=None,
    parameters=[o.CURSOR],
    responses={**ok(200, o.page_of(o.IdempotencyConflictOut)), **errors_for()},
)
@api_view(["GET"])
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


@extend_schema(
    operation_id="queue_list",
    request=None,
    parameters=[
        o.csv_query("state", "Default: all four.", OPEN_FOR_HUMANS),
        o.csv_query("tool", "Only these tools (names).", pattern=o.TOOL_NAME),
        o.query("order", "`oldest` for oldest first (the console's order).", enum=["oldest"]),
        o.CURSOR,
    ],
    responses={**ok(200, o.page_of(o.ActionOut)), **errors_for()},
)
@api_view(["GET"])
def queue(request):
    caller = require_operator(request)
    states = csv_param(request, "state", OPEN_FOR_HUMANS) or OPEN_FOR_HUMANS
    # Acknowledged blocked actions have left the queue; GET /actions/{id} still has them.
    tools = csv_param(request, "tool", pattern=o.TOOL_NAME)
    qs = selectors.open_queue(
        caller.tenant_ids,
        states=states,
        tool_ids=selectors.tool_ids(caller.tenant_ids, tools) if tools else None,
    )
    qs = selectors.with_attempts_and_reads(qs)
    oldest = choice_param(request, "order", ["oldest"]) == "oldest"
    return page(request, qs, present.action_dict, newest_first=not oldest)


# --- approvals ---------------------------------------------------------------------------


@extend_schema(
    operation_id="approval_requests_list",
    request=None,
    parameters=[
        o.csv_query("state", "Only requests in these states.", RequestState.values),
        o.CURSOR,
    ],
    responses={**ok(200, o.page_of(o.ApprovalRequestOut)), **errors_for()},
)
@api_view(["GET"])
def approval_requests(request):
    caller = require_operator(request, Role.APPROVER)
    qs = approval_requests_of(caller)
    if states := csv_param(request, "state", ["pending", "granted", "denied", "expired"]):
        qs = qs.filter(state__in=states)
    return page(request, qs, present.approval_request_dict)


@extend_schema(
    operation_id="approval_requests_grant",
    request=s.GrantIn,
    responses={**ok(201, o.ApprovalOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def approval_request_grant(request, pk):
    caller = require_operator(request, Role.APPROVER)
    req = approval_request_for(caller, pk)
    fields = valid(s.GrantIn, body_object(request) if request.body else {})
    approval = decisions.approval_request_grant(
        req, ttl_seconds=fields["ttl_seconds"], actor=caller.actor
    )
    # The approval as granted: a worker may consume it a moment later (GET shows that).
    return Response(present.approval_dict(approval), status=201)


@extend_schema(
    operation_id="approval_requests_deny",
    request=s.ReasonIn,
    responses={**ok(200, o.ApprovalRequestOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def approval_request_deny(request, pk):
    caller = require_operator(request, Role.APPROVER)
    req = approval_request_for(caller, pk)
    fields = valid(s.ReasonIn, body_object(request))
    if not fields["reason"].strip():
        raise ValidationFailed("A reason is required.", {"reason": ["Say why."]})
    decisions.approval_request_deny(req, reason=fields["reason"].strip(), actor=caller.actor)
    return Response(present.approval_request_dict(approval_request_for(caller, req.pk)))


@extend_schema(
    methods=["GET"],
    operation_id="approvals_list",
    parameters=[o.CURSOR],
    responses={**ok(200, o.page_of(o.ApprovalOut)), **errors_for()},
)
@extend_schema(
    methods=["POST"],
    operation_id="approvals_create",
    request=s.ApprovalIn,
    responses={**ok(201, o.ApprovalOut), **errors_for(411, 413, 415)},
)
@api_view(["GET", "POST"])
def approvals_collection(request):
    caller = require_operator(request, Role.APPROVER)
    if request.method == "GET":
        return page(
            request,
            approvals_of(caller),
            present.approval_dict,
            field="granted_at",
        )
    fields = valid(s.ApprovalIn, body_object(request))
    errors = {}
    principal = Principal.objects.filter(tenant=caller.tenant, name=fields["principal"]).first()
    tool = Tool.objects.filter(tenant=caller.tenant, name=fields["tool"]).first()
    if principal is None:
        errors["principal"] = [f"No principal named {fields['principal']!r} in this tenant."]
    if tool is None:
        errors["tool"] = [f"No tool named {fields['tool']!r} in this tenant."]
    if errors:
        raise ValidationFailed("Unknown names in the binding.", errors)
    approval = approvals.services.approval_grant(
        tenant=caller.tenant,
        principal=principal,
        tool=tool,
        target=fields["target"],
        desired_state=fields["desired_state"],
        expected_version=fields["expected_version"],
        ttl_seconds=fields["ttl_seconds"],
        actor=caller.actor,
    )
    return Response(present.approval_dict(approval), status=201)


@extend_schema(
    operation_id="approvals_retrieve",
    request=None,
    responses={**ok(200, o.ApprovalOut), **errors_for(404)},
)
@api_view(["GET"])
def approval_detail(request, pk):
    caller = require_operator(request, Role.APPROVER)
    return Response(present.approval_dict(approval_for(caller, pk)))


@extend_schema(
    operation_id="approvals_revoke",
    request=s.ReasonIn,
    responses={**ok(200, o.ApprovalOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def approval_revoke(request, pk):
    caller = require_operator(request, Role.APPROVER)
    approval = approval_for(caller, pk)
    fields = valid(s.ReasonIn, body_object(request) if request.body else {"reason": "revoked"})
    approvals.services.approval_revoke(approval, actor=caller.actor, reason=fields["reason"])
    return Response(present.approval_dict(approval_for(caller, pk)))


# --- ledger, audit, set-up -------------------------------------------------------------------


@extend_schema(
    operation_id="ledger_list",
    request=None,
    parameters=[
        o.query("key", "Only this Idempotency-Key (every generation)."),
        o.query("tool", "Only this tool (name)."),
        o.CURSOR,
    ],
    responses={**ok(200, o.page_of(o.LedgerEntryOut)), **errors_for()},
)
@api_view(["GET"])
def ledger(request):
    caller = require_operator(request, Role.ADMIN)
    params = request.query_params
    qs = ledger_entries_of(caller, key=params.get("key", ""), tool=params.get("tool", ""))
    return page(request, qs, present.ledger_dict)


@extend_schema(
    operation_id="ledger_revoke",
    request=s.ReasonIn,
    responses={**ok(200, o.LedgerEntryOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def ledger_revoke_view(request, pk):
    caller = require_operator(request, Role.ADMIN)
    entry = ledger_entry_for(caller, pk)
    fields = valid(s.ReasonIn, body_object(request))
    if not fields["reason"].strip():
        raise ValidationFailed("A reason is required.", {"reason": ["Say why."]})
    entry = ledger_revoke(entry, actor=caller.actor, reason=fields["reason"].strip())
    return Response(present.ledger_dict(entry))


@extend_schema(
    operation_id="audit_list",
    request=None,
    parameters=[
        o.query("verb", "A verb (`action.resolve`), or a prefix ending in a dot (`action.`)."),
        o.query("actor", "`kind:name` (`operator:alice`) or a bare name."),
        o.query("object", "The id of the object the event is about."),
        o.CURSOR,
    ],
    responses={**ok(200, o.page_of(o.AuditEventOut)), **errors_for()},
)
@api_view(["GET"])
def audit(request):
    caller = require_operator(request, Role.ADMIN)
    return page(
        request,
        audit_events(
            caller.tenant,
            verb=request.query_params.get("verb", ""),
            actor=request.query_params.get("actor", ""),
            obj=request.query_params.get("object", ""),
        ),
        present.audit_dict,
        field="at",
    )


@extend_schema(
    methods=["GET"],
    operation_id="tools_list",
    parameters=[o.CURSOR],
    responses={**ok(200, o.page_of(o.ToolOut)), **errors_for()},
)
@extend_schema(
    methods=["POST"],
    operation_id="tools_create",
    request=s.ToolIn,
    responses={**ok(201, o.ToolCreatedOut), **errors_for(409, 411, 413, 415)},
)
@api_view(["GET", "POST"])
def tools(request):
    if request.method == "GET":
        caller = request.user
        qs = Tool.objects.filter(tenant=caller.tenant)
        with_url = not caller.is_principal
        return page(request, qs, lambda t: present.tool_dict(t, with_url=with_url))
    caller = require_operator(request, Role.ADMIN)
    fields = valid(s.ToolIn, body_object(request))
    if fields.pop("kind") == "mcp":  # an MCP server's tool (runs/mcp_tools.py)
        tool = mcp_tools.register_listed(tenant=caller.tenant, actor=caller.actor, **fields)
    else:
        fields.pop("mcp", None)
        tool = tool_create(tenant=caller.tenant, actor=caller.actor, **fields)
    return Response(present.tool_dict(tool, with_secret=True), status=201)


def get_tool_for(caller, name) -> Tool:
    tool = Tool.objects.filter(tenant=caller.tenant, name=name).first()
    if tool is None:
        raise Http404
    return tool


@extend_schema(
    operation_id="tools_retrieve",
    request=None,
    responses={**ok(200, o.ToolOut), **errors_for(404)},
)
@api_view(["GET"])
def tool_detail(request, name):
    """One tool, by name, with its declarations (`effect`, `lookup`) and who made them; to a
    principal without its `base_url`, as in the list."""
    caller = request.user
    tool = get_tool_for(caller, name)
    return Response(present.tool_dict(tool, with_url=not caller.is_principal))


@extend_schema(
    operation_id="tools_rotate_secret",
    request=s.ToolRotateSecretIn,
    responses={
        **ok(201, o.ToolCreatedOut, "The tool, with its new signing secret, shown this once."),
        **errors_for(404, 411, 413, 415),
    },
)
@api_view(["POST"])
def tool_rotate_secret_view(request, name):
    """A new signing secret for the tool (admin, audited as `tool.rotate_secret`). With
    `overlap_seconds`, requests carry a signature with the old secret too until then, so the
    tool can switch without refusing a call."""
    caller = require_operator(request, Role.ADMIN)
    tool = get_tool_for(caller, name)
    fields = valid(s.ToolRotateSecretIn, body_object(request))
    tool = tool_rotate_secret(tool, actor=caller.actor, **fields)
    return Response(present.tool_dict(tool, with_secret=True), status=201)


@extend_schema(
    operation_id="tools_declare",
    request=s.ToolDeclareIn,
    responses={
        **ok(200, o.ToolOut, "The tool, declaring what it now is."),
        **errors_for(404, 409, 411, 413, 415),
    },
)
@api_view(["POST"])
def tool_declaration(request, name):
    """Change what a tool declares it is: `effect` and/or `lookup`, with a `reason`. Admin.

    Declarations are the tool owner's claims, and the engine acts on them (resends to
    `idempotent` tools, lookups, replay verdicts), so the change is audited
    (`tool.declare`, before and after) and every later decision records the declaration it
    relied on. 409 when nothing would change."""
    caller = require_operator(request, Role.ADMIN)
    tool = get_tool_for(caller, name)
    fields = valid(s.ToolDeclareIn, body_object(request))
    tool = tool_declare(tool, actor=caller.actor, **fields)
    return Response(present.tool_dict(tool))


@extend_schema(
    operation_id="principals_create",
    request=s.PrincipalIn,
    responses={**ok(201, o.PrincipalCreatedOut), **errors_for(409, 411, 413, 415)},
)
@api_view(["POST"])
def principals(request):
    caller = require_operator(request, Role.ADMIN)
    fields = valid(s.PrincipalIn, body_object(request))
    principal, token = principal_create(
        tenant=caller.tenant, name=fields["name"], actor=caller.actor
    )
    return Response(
        {
            "id": str(principal.pk),
            "name": principal.name,
            "tenant": caller.tenant.slug,
            "token": token,
        },
        status=201,
    )


# --- tokens ----------------------------------------------------------------------------------


def _tokens_visible(caller):
    """An admin sees (and may expire and revoke) the tokens of the tenant's principals and
    operators; anyone else sees their own."""
    if caller.is_admin:
        return tokens_manageable(caller.tenant, caller.user)
    return tokens_manageable(caller.tenant, caller.user, own=True)


def _token_for(caller, pk):
    token = _tokens_visible(caller).filter(pk=pk).first()
    if token is None:
        raise Http404
    return token


def _expiry(seconds):
    return timezone.now() + timedelta(seconds=seconds) if seconds else None


@extend_schema(
    methods=["GET"],
    operation_id="tokens_list",
    request=None,
    parameters=[
        o.query("state", "Only tokens in this state.", enum=["active", "revoked", "expired"]),
        o.CURSOR,
    ],
    responses={**ok(200, o.page_of(o.TokenOut)), **errors_for()},
)
@extend_schema(
    methods=["POST"],
    operation_id="tokens_create",
    request=s.TokenIn,
    responses={**ok(201, o.TokenCreatedOut), **errors_for(411, 413, 415)},
)
@api_view(["GET", "POST"])
def tokens(request):
    """Tokens. Any operator lists and issues their own (no owner in the body); an admin lists
    the tenant's and issues a principal's. Nobody receives another operator's secret."""
    caller = require_operator(request)
    if request.method == "GET":
        qs = _tokens_visible(caller)
        if state := choice_param(request, "state", ["active", "revoked", "expired"]):
            now = timezone.now()
            live = Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            filters = {
                "active": live,
                "revoked": Q(revoked_at__isnull=False),
                "expired": Q(revoked_at__isnull=True, expires_at__lte=now),
            }
            qs = qs.filter(filters[state])
        return page(request, qs, present.token_dict)
    fields = valid(s.TokenIn, body_object(request))
    if fields.get("principal"):
        owner = {
            "principal": Principal.objects.filter(
                tenant=caller.tenant, name=fields["principal"]
            ).first()
        }
        if owner["principal"] is None:
            raise ValidationFailed(
                "No such principal.", {"principal": ["No principal of that name here."]}
            )
    elif fields.get("operator") and fields["operator"] != caller.user.get_username():
        user = _member(caller, fields["operator"])
        if user is None:
            raise ValidationFailed(
                "No such operator.", {"operator": ["No operator of that name in this tenant."]}
            )
        owner = {"user": user}
    else:
        owner = {"user": caller.user}
    token, raw = token_issue(
        tenant=caller.tenant,
        actor=caller.actor,
        name=fields["name"],
        expires_at=_expiry(fields["expires_in_seconds"]),
        **owner,
    )
    return Response(present.token_dict(token, raw), status=201)


def _member(caller, username):
    """The operator `username`, when they are a member of the caller's tenant."""
    return (
        get_user_model()
        .objects.filter(username=username, memberships__tenant=caller.tenant)
        .first()
    )


@extend_schema(
    request=s.OptionalReasonIn,
    responses={**ok(200, o.TokenOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def token_revoke_view(request, pk):
    caller = require_operator(request)
    token = _token_for(caller, pk)
    fields = valid(s.OptionalReasonIn, body_object(request))
    token = token_revoke(token, tenant=caller.tenant, actor=caller.actor, reason=fields["reason"])
    return Response(present.token_dict(token))


@extend_schema(
    request=s.TokenRotateIn,
    description=(
        "Your own token, or (admin) a principal's: 201 with its successor, shown once. "
        "(Admin) another operator's token: it is revoked at once and there is no successor "
        "(200, the revoked token): a person's credentials are theirs alone."
    ),
    responses={
        **ok(201, o.TokenCreatedOut),
        **ok(200, o.TokenOut),
        **errors_for(404, 409, 411, 413, 415),
    },
)
@api_view(["POST"])
def token_rotate_view(request, pk):
    caller = require_operator(request)
    token = _token_for(caller, pk)
    fields = valid(s.TokenRotateIn, body_object(request))
    options = {}
    if fields["expires_in_seconds"] is not None:
        options["expires_at"] = _expiry(fields["expires_in_seconds"])
    new, raw = token_rotate(
        token,
        tenant=caller.tenant,
        actor=caller.actor,
        overlap_seconds=fields["overlap_seconds"],
        reason=fields["reason"],
        **options,
    )
    if raw is None:
        return Response(present.token_dict(new), status=200)
    return Response(present.token_dict(new, raw), status=201)


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


@extend_schema(
    operation_id="bulk_preview",
    request=o.BulkIn,
    responses={**ok(200, o.BulkPlanOut), **errors_for(411, 413, 415)},
)
@api_view(["POST"])
def bulk_preview(request):
    """What resolving or re-checking these actions, or replaying these runs, would do, item
    by item, without doing any of it. Items the caller cannot see, or may not act on, are
    in the plan with `will: skip` and the reason."""
    from runs import bulk

    _viewer, args, _ = _bulk_args(request, s.BulkIn)
    return Response(bulk.bulk_plan(**args).as_dict())


@extend_schema(
    operation_id="bulk_apply",
    request=o.BulkApplyIn,
    responses={**ok(200, o.BulkResultOut), **errors_for(409, 411, 413, 415)},
)
@api_view(["POST"])
def bulk_apply(request):
    """Do what the preview with this `signature` said. 409 `state-conflict` (with the new
    `plan`) when the plan is not that one any more: nothing was done. Each decision is
    audited by its own service, and the batch as `bulk.apply`."""
    from runs import bulk

    _viewer, args, fields = _bulk_args(request, s.BulkApplyIn)
    plan, results = bulk.bulk_apply(signature=fields["signature"], **args)
    return Response({"plan": plan.as_dict(), "results": [r.as_dict() for r in results]})
