"""What approvers and admins do on the API: approval requests (grant, deny) and approvals
(pre-grant, read, revoke), the ledger, the audit log, and set-up: tools, principals, API
tokens."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import Http404
from django.utils import timezone
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
from core.selectors import audit_events
from core.services import (
    principal_create,
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
from runs import decisions, mcp_tools, presenters

from .common import (
    body_object,
    choice_param,
    csv_param,
    page,
    valid,
)
from .endpoints import decision_endpoint, endpoint, page_endpoint, post_endpoint

# --- approvals ---------------------------------------------------------------------------


@page_endpoint(
    "approval_requests_list",
    resources.ApprovalRequestOut,
    schema.csv_query("state", "Only requests in these states.", RequestState.values),
)
def approval_requests(request):
    caller = require_operator(request, Role.APPROVER)
    qs = approval_requests_of(caller)
    if states := csv_param(request, "state", ["pending", "granted", "denied", "expired"]):
        qs = qs.filter(state__in=states)
    return page(request, qs, presenters.approval_request_dict)


@decision_endpoint(
    "approval_requests_grant", resources.ApprovalOut, serializers.GrantIn, status=201
)
def approval_request_grant(request, pk):
    caller = require_operator(request, Role.APPROVER)
    req = approval_request_for(caller, pk)
    fields = valid(serializers.GrantIn, body_object(request) if request.body else {})
    approval = decisions.approval_request_grant(
        req, ttl_seconds=fields["ttl_seconds"], actor=caller.actor
    )
    # The approval as granted: a worker may consume it a moment later (GET shows that).
    return Response(presenters.approval_dict(approval), status=201)


@decision_endpoint("approval_requests_deny", resources.ApprovalRequestOut, serializers.ReasonIn)
def approval_request_deny(request, pk):
    caller = require_operator(request, Role.APPROVER)
    req = approval_request_for(caller, pk)
    fields = valid(serializers.ReasonIn, body_object(request))
    decisions.approval_request_deny(req, reason=fields["reason"], actor=caller.actor)
    return Response(presenters.approval_request_dict(approval_request_for(caller, req.pk)))


@page_endpoint("approvals_list", resources.ApprovalOut)
@post_endpoint("approvals_create", resources.ApprovalOut, serializers.ApprovalIn, status=201)
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


@endpoint("GET", "approvals_retrieve", ok(200, resources.ApprovalOut), errors_for(404))
def approval_detail(request, pk):
    caller = require_operator(request, Role.APPROVER)
    return Response(presenters.approval_dict(approval_for(caller, pk)))


@decision_endpoint("approvals_revoke", resources.ApprovalOut, serializers.ReasonIn)
def approval_revoke(request, pk):
    caller = require_operator(request, Role.APPROVER)
    approval = approval_for(caller, pk)
    fields = valid(
        serializers.ReasonIn, body_object(request) if request.body else {"reason": "revoked"}
    )
    approvals.services.approval_revoke(approval, actor=caller.actor, reason=fields["reason"])
    return Response(presenters.approval_dict(approval_for(caller, pk)))


# --- ledger, audit, set-up -------------------------------------------------------------------


@page_endpoint(
    "ledger_list",
    resources.LedgerEntryOut,
    schema.query("key", "Only this Idempotency-Key (every generation)."),
    schema.query("tool", "Only this tool (name)."),
)
def ledger(request):
    caller = require_operator(request, Role.ADMIN)
    params = request.query_params
    qs = ledger_entries_of(caller, key=params.get("key", ""), tool=params.get("tool", ""))
    return page(request, qs, presenters.ledger_dict)


@decision_endpoint("ledger_revoke", resources.LedgerEntryOut, serializers.ReasonIn)
def ledger_revoke_view(request, pk):
    caller = require_operator(request, Role.ADMIN)
    entry = ledger_entry_for(caller, pk)
    fields = valid(serializers.ReasonIn, body_object(request))
    entry = ledger_revoke(entry, actor=caller.actor, reason=fields["reason"])
    return Response(presenters.ledger_dict(entry))


@page_endpoint(
    "audit_list",
    resources.AuditEventOut,
    schema.query("verb", "A verb (`action.resolve`), or a prefix ending in a dot (`action.`)."),
    schema.query("actor", "`kind:name` (`operator:alice`) or a bare name."),
    schema.query("object", "The id of the object the event is about."),
)
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
        presenters.audit_dict,
        field="at",
    )


@page_endpoint("tools_list", resources.ToolOut)
@post_endpoint("tools_create", resources.ToolCreatedOut, serializers.ToolIn, 409, status=201)
def tools(request):
    if request.method == "GET":
        caller = request.user
        qs = Tool.objects.filter(tenant=caller.tenant)
        with_url = not caller.is_principal
        return page(request, qs, lambda t: presenters.tool_dict(t, with_url=with_url))
    caller = require_operator(request, Role.ADMIN)
    fields = valid(serializers.ToolIn, body_object(request))
    if fields.pop("kind") == "mcp":  # an MCP server's tool (runs/mcp_tools.py)
        tool = mcp_tools.register_listed(tenant=caller.tenant, actor=caller.actor, **fields)
    else:
        fields.pop("mcp", None)
        tool = tool_create(tenant=caller.tenant, actor=caller.actor, **fields)
    return Response(presenters.tool_dict(tool, with_secret=True), status=201)


def get_tool_for(caller, name) -> Tool:
    tool = Tool.objects.filter(tenant=caller.tenant, name=name).first()
    if tool is None:
        raise Http404
    return tool


@endpoint("GET", "tools_retrieve", ok(200, resources.ToolOut), errors_for(404))
def tool_detail(request, name):
    """One tool, by name, with its declarations (`effect`, `lookup`) and who made them; to a
    principal without its `base_url`, as in the list."""
    caller = request.user
    tool = get_tool_for(caller, name)
    return Response(presenters.tool_dict(tool, with_url=not caller.is_principal))


@endpoint(
    "POST",
    "tools_rotate_secret",
    ok(201, resources.ToolCreatedOut, "The tool, with its new signing secret, shown this once."),
    errors_for(404, 411, 413, 415),
    request=serializers.ToolRotateSecretIn,
)
def tool_rotate_secret_view(request, name):
    """A new signing secret for the tool (admin, audited as `tool.rotate_secret`). With
    `overlap_seconds`, requests carry a signature with the old secret too until then, so the
    tool can switch without refusing a call."""
    caller = require_operator(request, Role.ADMIN)
    tool = get_tool_for(caller, name)
    fields = valid(serializers.ToolRotateSecretIn, body_object(request))
    tool = tool_rotate_secret(tool, actor=caller.actor, **fields)
    return Response(presenters.tool_dict(tool, with_secret=True), status=201)


@endpoint(
    "POST",
    "tools_declare",
    ok(200, resources.ToolOut, "The tool, declaring what it now is."),
    errors_for(404, 409, 411, 413, 415),
    request=serializers.ToolDeclareIn,
)
def tool_declaration(request, name):
    """Change what a tool declares it is: `effect` and/or `lookup`, with a `reason`. Admin.

    Declarations are the tool owner's claims, and the engine acts on them (resends to
    `idempotent` tools, lookups, replay verdicts), so the change is audited
    (`tool.declare`, before and after) and every later decision records the declaration it
    relied on. 409 when nothing would change."""
    caller = require_operator(request, Role.ADMIN)
    tool = get_tool_for(caller, name)
    fields = valid(serializers.ToolDeclareIn, body_object(request))
    tool = tool_declare(tool, actor=caller.actor, **fields)
    return Response(presenters.tool_dict(tool))


@post_endpoint(
    "principals_create", resources.PrincipalCreatedOut, serializers.PrincipalIn, 409, status=201
)
def principals(request):
    caller = require_operator(request, Role.ADMIN)
    fields = valid(serializers.PrincipalIn, body_object(request))
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


@page_endpoint(
    "tokens_list",
    resources.TokenOut,
    schema.query("state", "Only tokens in this state.", enum=["active", "revoked", "expired"]),
)
@post_endpoint("tokens_create", resources.TokenCreatedOut, serializers.TokenIn, status=201)
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
        return page(request, qs, presenters.token_dict)
    fields = valid(serializers.TokenIn, body_object(request))
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
    return Response(presenters.token_dict(token, raw), status=201)


def _member(caller, username):
    """The operator `username`, when they are a member of the caller's tenant."""
    return (
        get_user_model()
        .objects.filter(username=username, memberships__tenant=caller.tenant)
        .first()
    )


@decision_endpoint(None, resources.TokenOut, serializers.OptionalReasonIn)
def token_revoke_view(request, pk):
    caller = require_operator(request)
    token = _token_for(caller, pk)
    fields = valid(serializers.OptionalReasonIn, body_object(request))
    token = token_revoke(token, tenant=caller.tenant, actor=caller.actor, reason=fields["reason"])
    return Response(presenters.token_dict(token))


@endpoint(
    "POST",
    None,
    ok(201, resources.TokenCreatedOut),
    ok(200, resources.TokenOut),
    errors_for(404, 409, 411, 413, 415),
    request=serializers.TokenRotateIn,
    description="Your own token, or (admin) a principal's: 201 with its successor, shown once. "
    "(Admin) another operator's token: it is revoked at once and there is no successor "
    "(200, the revoked token): a person's credentials are theirs alone.",
)
def token_rotate_view(request, pk):
    caller = require_operator(request)
    token = _token_for(caller, pk)
    fields = valid(serializers.TokenRotateIn, body_object(request))
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
        return Response(presenters.token_dict(new), status=200)
    return Response(presenters.token_dict(new, raw), status=201)
