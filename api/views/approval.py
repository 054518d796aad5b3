"""Approval requests (grant, deny) and approvals (pre-grant, read, revoke)."""

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

import approvals.services
from api import resources, schema, serializers
from api.permissions import require_operator
from api.schema import errors_for, ok
from approvals.models import RequestState
from approvals.selectors import (
    approval_for,
    approval_request_for,
    approval_requests_of,
    approvals_of,
)
from core.errors import ValidationFailed
from core.models import Principal, Role, Tool
from runs import decisions, presenters

from .common import (
    body_object,
    csv_param,
    page,
    valid,
)

# --- approvals ---------------------------------------------------------------------------


@extend_schema(
    operation_id="approval_requests_list",
    request=None,
    parameters=[
        schema.csv_query("state", "Only requests in these states.", RequestState.values),
        schema.CURSOR,
    ],
    responses={**ok(200, schema.page_of(resources.ApprovalRequestOut)), **errors_for()},
)
@api_view(["GET"])
def approval_requests(request):
    caller = require_operator(request, Role.APPROVER)
    qs = approval_requests_of(caller)
    if states := csv_param(request, "state", ["pending", "granted", "denied", "expired"]):
        qs = qs.filter(state__in=states)
    return page(request, qs, presenters.approval_request_dict)


@extend_schema(
    operation_id="approval_requests_grant",
    request=serializers.GrantIn,
    responses={**ok(201, resources.ApprovalOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def approval_request_grant(request, pk):
    caller = require_operator(request, Role.APPROVER)
    req = approval_request_for(caller, pk)
    fields = valid(serializers.GrantIn, body_object(request) if request.body else {})
    approval = decisions.approval_request_grant(
        req, ttl_seconds=fields["ttl_seconds"], actor=caller.actor
    )
    # The approval as granted: a worker may consume it a moment later (GET shows that).
    return Response(presenters.approval_dict(approval), status=201)


@extend_schema(
    operation_id="approval_requests_deny",
    request=serializers.ReasonIn,
    responses={**ok(200, resources.ApprovalRequestOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def approval_request_deny(request, pk):
    caller = require_operator(request, Role.APPROVER)
    req = approval_request_for(caller, pk)
    fields = valid(serializers.ReasonIn, body_object(request))
    if not fields["reason"].strip():
        raise ValidationFailed("A reason is required.", {"reason": ["Say why."]})
    decisions.approval_request_deny(req, reason=fields["reason"].strip(), actor=caller.actor)
    return Response(presenters.approval_request_dict(approval_request_for(caller, req.pk)))


@extend_schema(
    methods=["GET"],
    operation_id="approvals_list",
    parameters=[schema.CURSOR],
    responses={**ok(200, schema.page_of(resources.ApprovalOut)), **errors_for()},
)
@extend_schema(
    methods=["POST"],
    operation_id="approvals_create",
    request=serializers.ApprovalIn,
    responses={**ok(201, resources.ApprovalOut), **errors_for(411, 413, 415)},
)
@api_view(["GET", "POST"])
def approvals_collection(request):
    caller = require_operator(request, Role.APPROVER)
    if request.method == "GET":
        return page(
            request,
            approvals_of(caller),
            presenters.approval_dict,
            field="granted_at",
        )
    fields = valid(serializers.ApprovalIn, body_object(request))
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
    return Response(presenters.approval_dict(approval), status=201)


@extend_schema(
    operation_id="approvals_retrieve",
    request=None,
    responses={**ok(200, resources.ApprovalOut), **errors_for(404)},
)
@api_view(["GET"])
def approval_detail(request, pk):
    caller = require_operator(request, Role.APPROVER)
    return Response(presenters.approval_dict(approval_for(caller, pk)))


@extend_schema(
    operation_id="approvals_revoke",
    request=serializers.ReasonIn,
    responses={**ok(200, resources.ApprovalOut), **errors_for(404, 409, 411, 413, 415)},
)
@api_view(["POST"])
def approval_revoke(request, pk):
    caller = require_operator(request, Role.APPROVER)
    approval = approval_for(caller, pk)
    fields = valid(
        serializers.ReasonIn, body_object(request) if request.body else {"reason": "revoked"}
    )
    approvals.services.approval_revoke(approval, actor=caller.actor, reason=fields["reason"])
    return Response(presenters.approval_dict(approval_for(caller, pk)))
