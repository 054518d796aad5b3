"""Who is calling, runs (what a runtime does to its run), replay and force replay, and the
tenant's settings."""

from django.conf import settings
from drf_spectacular.utils import OpenApiRequest, OpenApiResponse
from rest_framework.decorators import parser_classes
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from api import resources, schema, serializers
from api.parsers import StrictJSONParser, refused
from api.permissions import require_operator, require_principal
from api.problems import problem
from api.schema import errors_for, ok
from core import jsonsafe
from core.errors import ValidationFailed
from core.models import Role
from core.services import (
    tenant_settings_update,
)
from runs import presenters, replay, runtime, selectors
from runs.models import (
    ForceReplayRequest,
    Replay,
)
from runs.states import RunStatus

from .common import (
    RUN_409,
    body_object,
    csv_param,
    page,
    valid,
)
from .endpoints import decision_endpoint, endpoint, page_endpoint, post_endpoint

# --- who am I ---------------------------------------------------------------------------


@endpoint("GET", "me", ok(200, resources.MeOut), errors_for())
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


@page_endpoint(
    "runs_list",
    resources.RunOut,
    schema.csv_query("status", "Only runs in these statuses.", RunStatus.values),
)
@endpoint(
    "POST",
    "runs_start",
    ok(201, resources.RunDetailOut),
    errors_for(411, 413, 415),
    request={
        "application/json": serializers.RunStartIn,
        "multipart/form-data": OpenApiRequest(
            resources.RunStartMultipartIn, encoding=resources.RUN_START_ENCODING
        ),
    },
)
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
        fields = valid(serializers.RunStartUploadIn, data)
    else:
        fields = valid(serializers.RunStartIn, body_object(request))
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


@endpoint("GET", "runs_retrieve", ok(200, resources.RunDetailOut), errors_for(404))
def run_detail(request, pk):
    return Response(selectors.run_resource(selectors.run_for(request.user, pk)))


@endpoint(
    "POST",
    "runs_heartbeat",
    ok(200, resources.RunOut),
    errors_for(404, 409, 411, 413, 415, slugs=RUN_409),
    request=None,
)
def run_heartbeat(request, pk):
    require_principal(request)
    run = runtime.run_heartbeat(selectors.run_for(request.user, pk), actor=request.user.actor)
    return Response(selectors.run_resource(run, with_actions=False))


@endpoint(
    "POST",
    "runs_finish",
    ok(200, resources.RunDetailOut),
    errors_for(404, 409, 411, 413, 415, slugs=RUN_409),
    request=serializers.RunFinishIn,
)
def run_finish(request, pk):
    require_principal(request)
    run = selectors.run_for(request.user, pk)
    fields = valid(serializers.RunFinishIn, body_object(request))
    run = runtime.run_finish(run, actor=request.user.actor, **fields)
    return Response(selectors.run_resource(run))


@endpoint(
    "POST",
    "runs_claim",
    ok(200, resources.RunDetailOut, "The claimed run, now running."),
    {204: OpenApiResponse(description="No pending run for this principal.")},
    errors_for(411, 413, 415),
    request=None,
)
def run_claim(request):
    principal = require_principal(request)
    run = runtime.run_claim(principal=principal, actor=request.user.actor)
    if run is None:
        return Response(status=204)
    return Response(selectors.run_resource(run))


@endpoint(
    "POST",
    "runs_replay",
    ok(201, resources.RunDetailOut, "The new run (pending), for a runtime to claim."),
    ok(
        202,
        resources.ForceReplayRequestOut,
        "With the tenant's four-eyes setting, a force that needs one waits for a "
        "second admin: the waiting force replay request.",
    ),
    errors_for(404, 409, 410, 411, 413, 415, slugs={409: ["replay-refused"]}),
    request=serializers.ReplayIn,
)
def run_replay(request, pk):
    run = selectors.run_for(request.user, pk)
    fields = valid(serializers.ReplayIn, body_object(request) if request.body else {})
    caller = request.user
    if fields["force"]:
        new_run, waiting = replay.run_force_replay(run, reason=fields["reason"], actor=caller.actor)
        if waiting is not None:
            return Response(presenters.force_request_dict(waiting), status=202)
    else:
        new_run = replay.run_replay(run, force=False, reason="", actor=caller.actor)
    return Response(selectors.run_resource(new_run), status=201)


FORCE_REQUEST_STATES = ["pending", "confirmed", "rejected"]


@page_endpoint(
    "force_replay_requests_list",
    resources.ForceReplayRequestOut,
    schema.csv_query("state", "Only requests in these states.", FORCE_REQUEST_STATES),
)
def force_replay_requests(request):
    """Four-eyes force replays, newest first; `?state=pending` for those waiting. Admin."""
    caller = require_operator(request, Role.ADMIN)
    qs = ForceReplayRequest.objects.filter(tenant=caller.tenant)
    if states := csv_param(request, "state", FORCE_REQUEST_STATES):
        qs = qs.filter(state__in=states)
    return page(request, qs, presenters.force_request_dict)


@endpoint(
    "POST",
    None,
    ok(201, resources.RunDetailOut),
    errors_for(404, 409, slugs={409: ["state-conflict"]}),
    request=None,
)
def force_replay_confirm(request, pk):
    """A second admin confirms: 201 with the new run. 409 for the requester themselves."""
    caller = require_operator(request, Role.ADMIN)
    new_run = replay.force_replay_confirm(
        selectors.force_request_for(caller, pk), actor=caller.actor
    )
    return Response(selectors.run_resource(new_run), status=201)


@decision_endpoint(None, resources.ForceReplayRequestOut, serializers.NoteIn)
def force_replay_reject(request, pk):
    caller = require_operator(request, Role.ADMIN)
    fields = valid(serializers.NoteIn, body_object(request) if request.body else {})
    req = replay.force_replay_reject(
        selectors.force_request_for(caller, pk), reason=fields["reason"].strip(), actor=caller.actor
    )
    return Response(presenters.force_request_dict(req))


@endpoint("GET", "settings_retrieve", ok(200, resources.TenantSettingsOut), errors_for())
@post_endpoint("settings_update", resources.TenantSettingsOut, serializers.TenantSettingsIn)
def tenant_settings(request):
    """The tenant's settings (admin): `four_eyes_force_replay`, `approval_sla_seconds`, and
    the notification thresholds. A POST changes the fields it names."""
    caller = require_operator(request, Role.ADMIN)
    tenant = caller.tenant
    if request.method == "POST":
        fields = valid(serializers.TenantSettingsIn, body_object(request))
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


@page_endpoint("replays_list", resources.ReplayOut)
def replays(request):
    caller = require_operator(request, Role.ADMIN)
    qs = Replay.objects.filter(tenant=caller.tenant)
    return page(request, qs, presenters.replay_record, field="at")
