"""What API v1 answers, for the OpenAPI schema (docs/design.md, "The API's conventions").
Documentation only: the views answer with `runs.presenters`' dicts, and
`tests/api/test_schema.py` validates real answers against these shapes, so the two cannot
drift apart unnoticed.

- Resource serializers mirror the presenters field by field.
- Lists are `{"results": [...], "next": cursor | null}` (`page_of`).
- Every error is `application/problem+json`; `errors_for` documents, per operation, the
  statuses it can really answer and, per status, the `type` values it carries.
"""

from drf_spectacular import openapi
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers as f

from approvals.models import ApprovalState, RequestState
from core.models import ToolEffect, ToolKind
from ledger.models import LedgerStatus
from runs.states import (
    ActionState,
    AttemptKind,
    AttemptOutcome,
    BlockReason,
    FailureReason,
    ReadKind,
    Resolution,
    RunStatus,
    Trigger,
    Verdict,
)

PROBLEM = "application/problem+json"


def _choice(choices, **kw):
    return f.ChoiceField(choices=choices, **kw)


def _nullable_choice(choices):
    return f.ChoiceField(choices=choices, allow_null=True)


class ActorOut(f.Serializer):
    kind = f.ChoiceField(choices=["operator", "principal", "system"])
    name = f.CharField()


class DiffOut(f.Serializer):
    field = f.CharField()
    desired = f.JSONField()
    actual = f.JSONField()


class AuthoritativeOut(f.Serializer):
    state = f.DictField()
    version = f.IntegerField()


class DeclarationOut(f.Serializer):
    """What a tool declared it is, as it stood when a decision relied on it."""

    effect = _choice(ToolEffect.choices)
    lookup = f.BooleanField(help_text="It answers GET {base_url}/effects/{key}.")
    declared_by = ActorOut(allow_null=True)
    declared_at = f.DateTimeField(allow_null=True)


class AttemptOut(f.Serializer):
    number = f.IntegerField()
    started_at = f.DateTimeField()
    finished_at = f.DateTimeField(allow_null=True)
    outcome = _nullable_choice(AttemptOutcome.choices)
    http_status = f.IntegerField(allow_null=True)
    detail = f.CharField(allow_blank=True)
    kind = _choice(
        AttemptKind.choices,
        help_text="`send` (the first), `safe_retry` (the previous attempt provably never "
        "left), `resend` (an unknown outcome sent again with the same Idempotency-Key, "
        "because the tool declares `idempotent` or `read_only`).",
    )
    declaration = DeclarationOut(
        allow_null=True, help_text="For a resend: the declaration that allowed it."
    )


class ReconciliationOut(f.Serializer):
    at = f.DateTimeField()
    authoritative = AuthoritativeOut(allow_null=True)
    verdict = _choice(
        Verdict.choices,
        help_text="A state read: `match`, `mismatch`, `moved_on`, `read_failed`, `missing`. "
        "A lookup (`kind: lookup`): `lookup_applied` (the tool applied the key: settles "
        "the action), `lookup_not_found` (the tool reports it never received the key), "
        "`lookup_failed` (it could not tell; the state is read instead).",
    )
    diff = DiffOut(many=True)
    expected_version = f.IntegerField(allow_null=True)
    actual_version = f.IntegerField(allow_null=True)
    detail = f.CharField(allow_blank=True)
    actor = ActorOut(allow_null=True)
    kind = _choice(
        ReadKind.choices,
        help_text="`state`: GET {base_url}/state/{target}; `lookup`: GET {base_url}/effects/{key}.",
    )
    declaration = DeclarationOut(
        allow_null=True, help_text="For a lookup: the declaration that made Takeover ask."
    )


class ActionOut(f.Serializer):
    id = f.UUIDField()
    run = f.UUIDField()
    tenant = f.CharField()
    principal = f.CharField()
    tool = f.CharField()
    target = f.CharField()
    desired_state = f.DictField()
    expected_version = f.IntegerField(allow_null=True)
    idempotency_key = f.CharField()
    effect = _choice(
        ToolEffect.choices,
        help_text="The tool's effect declaration when this was proposed: a `read_only` "
        "tool's action needs no approval and holds no ledger key.",
    )
    state = _choice(ActionState.choices)
    block_reason = _nullable_choice(BlockReason.choices)
    failure_reason = _nullable_choice(FailureReason.choices)
    resolution = _nullable_choice(Resolution.choices)
    resolution_reason = f.CharField(allow_null=True)
    approval_id = f.UUIDField(allow_null=True)
    approval_request_id = f.UUIDField(allow_null=True)
    replayed = f.BooleanField(help_text="True when answered from the ledger (same key).")
    content_changed = f.BooleanField(
        help_text="On a ledger hit: non-identity fields of desired_state differ."
    )
    attempts = AttemptOut(many=True)
    reconciliations = ReconciliationOut(many=True)
    claimed_by = f.CharField(allow_null=True, help_text="The on-call holding it in the console.")
    origin = _choice(
        [("api", "api"), ("mcp", "mcp"), ("cli", "cli")],
        help_text="Where it was proposed: the API, Takeover's /mcp, or the takeover CLI.",
    )
    client = f.CharField(
        allow_null=True, help_text="The MCP client's name (or the CLI's), when it said one."
    )
    created_at = f.DateTimeField()
    updated_at = f.DateTimeField()


class ActionSummaryOut(f.Serializer):
    id = f.UUIDField()
    tool = f.CharField()
    target = f.CharField()
    idempotency_key = f.CharField()
    state = _choice(ActionState.choices)
    block_reason = _nullable_choice(BlockReason.choices)
    failure_reason = _nullable_choice(FailureReason.choices)
    resolution = _nullable_choice(Resolution.choices)
    created_at = f.DateTimeField()


class InputFileOut(f.Serializer):
    name = f.CharField()
    size = f.IntegerField()
    sha256 = f.CharField()


class RunOut(f.Serializer):
    id = f.UUIDField()
    tenant = f.CharField()
    principal = f.CharField()
    trigger = _choice(Trigger.choices)
    config = f.DictField()
    input_file = InputFileOut(allow_null=True)
    session_id = f.CharField()
    status = _choice(RunStatus.choices)
    attempts = f.IntegerField()
    error_message = f.CharField(allow_blank=True)
    replay_of = f.UUIDField(allow_null=True)
    tools_executed = f.ListField(
        child=f.CharField(),
        allow_null=True,
        help_text="[] verified no tool called; a list of tools called; null unknown.",
    )
    created_at = f.DateTimeField()
    started_at = f.DateTimeField(allow_null=True)
    finished_at = f.DateTimeField(allow_null=True)
    heartbeat_at = f.DateTimeField(allow_null=True)


class SafeToolOut(DeclarationOut):
    tool = f.CharField()
    why = f.CharField(help_text="Which declaration makes a repeat harmless, in words.")


class ReplayVerdictOut(f.Serializer):
    allowed = f.BooleanField(help_text="A replay without force would be created.")
    forceable = f.BooleanField()
    gone = f.BooleanField(help_text="The input file is no longer stored (410).")
    message = f.CharField()
    tools_at_risk = f.ListField(child=f.CharField(), allow_null=True)
    not_applied = f.ListField(
        child=f.CharField(), help_text="Called tools an operator resolved as not applied."
    )
    safe_tools = SafeToolOut(
        many=True,
        help_text="Called tools that their declarations make safe to repeat: `read_only`, "
        "or `idempotent` with every call keyed through Takeover.",
    )


class RunDetailOut(RunOut):
    actions = ActionSummaryOut(many=True)
    replay_verdict = ReplayVerdictOut(help_text="What a replay without force would answer.")


class ReplayOut(f.Serializer):
    id = f.UUIDField()
    original_run = f.UUIDField()
    new_run = f.UUIDField()
    actor = ActorOut()
    forced = f.BooleanField()
    reason = f.CharField(allow_blank=True)
    tools_at_risk = f.ListField(child=f.CharField(), allow_null=True)
    safe_tools = SafeToolOut(many=True)
    at = f.DateTimeField()


class BindingOut(f.Serializer):
    principal = f.CharField()
    tool = f.CharField()
    target = f.CharField()
    desired_state = f.DictField()
    expected_version = f.IntegerField(allow_null=True)


class ApprovalOut(BindingOut):
    id = f.UUIDField()
    state = _choice(ApprovalState.choices)
    tenant = f.CharField()
    expires_at = f.DateTimeField()
    granted_by = ActorOut()
    granted_at = f.DateTimeField()
    consumed_by_action = f.UUIDField(allow_null=True)
    consumed_at = f.DateTimeField(allow_null=True)
    request = f.UUIDField(allow_null=True, help_text="The approval request it answered.")
    revoked_at = f.DateTimeField(allow_null=True)
    revoke_reason = f.CharField(allow_null=True)


class ApprovalRequestOut(BindingOut):
    id = f.UUIDField()
    action = f.UUIDField()
    state = _choice(RequestState.choices)
    tenant = f.CharField()
    created_at = f.DateTimeField()
    expires_at = f.DateTimeField(allow_null=True)
    decided_by = ActorOut(allow_null=True)
    decided_at = f.DateTimeField(allow_null=True)
    reason = f.CharField(allow_null=True)


class LedgerEntryOut(f.Serializer):
    id = f.UUIDField()
    tenant = f.CharField()
    key = f.CharField()
    generation = f.IntegerField()
    tool = f.CharField()
    action = f.UUIDField(allow_null=True)
    status = _choice(LedgerStatus.choices)
    fingerprint = f.CharField()
    created_at = f.DateTimeField()
    updated_at = f.DateTimeField()
    revoked = f.BooleanField()
    revoked_at = f.DateTimeField(allow_null=True)
    revoked_reason = f.CharField(allow_null=True)
    revoked_by = ActorOut(allow_null=True)


class AuditEventOut(f.Serializer):
    id = f.UUIDField()
    at = f.DateTimeField()
    actor = ActorOut()
    verb = f.CharField()
    object_type = f.CharField()
    object_id = f.CharField()
    before = f.JSONField(allow_null=True)
    after = f.JSONField(allow_null=True)
    reason = f.CharField(allow_blank=True)
    request_id = f.CharField(allow_blank=True)


class ToolMcpOut(f.Serializer):
    tool = f.CharField(help_text="The upstream tool that applies the effect.")
    target_argument = f.CharField()
    read_tool = f.CharField()
    lookup_tool = f.CharField(allow_null=True)
    annotations = f.DictField(help_text="The upstream's hints, as listed.")
    suggested_effect = f.CharField(
        allow_null=True,
        help_text="What the hints suggest (`read_only`, `idempotent`): applied only when an "
        "admin confirms it (POST /tools/{name}/declaration).",
    )


class ToolOut(f.Serializer):
    id = f.UUIDField()
    name = f.CharField()
    # Operators only: a principal is not told where a tool lives.
    base_url = f.URLField(required=False)
    effect = _choice(
        ToolEffect.choices,
        help_text="`read_only`: no side effect (no approval, no ledger key, never at risk in "
        "a replay); `idempotent`: applies an Idempotency-Key at most once and answers a "
        "repeat with the first result (an unknown outcome is re-sent with the same key); "
        "`unsafe`: neither (the default).",
    )
    lookup = f.BooleanField(
        help_text="Answers GET {base_url}/effects/{key}: 200 `{applied: true, state, "
        "version}` or 404; reconciliation asks it first."
    )
    declared_by = ActorOut(allow_null=True, help_text="Who made the declaration in force.")
    declared_at = f.DateTimeField(allow_null=True)
    requires_approval = f.BooleanField()
    identity_fields = f.ListField(child=f.CharField())
    timeout_seconds = f.FloatField()
    created_at = f.DateTimeField()
    # Operators only, like base_url.
    signing_secret_created_at = f.DateTimeField(required=False)
    previous_secret_expires_at = f.DateTimeField(
        required=False,
        allow_null=True,
        help_text="While set and in the future, requests are signed with the previous secret too.",
    )
    kind = _choice(
        ToolKind.choices,
        help_text="`http`: the tool protocol at base_url; `mcp`: an MCP server's tool.",
    )
    mcp = ToolMcpOut(required=False, help_text="An MCP tool's upstream (operators only).")


class ToolCreatedOut(ToolOut):
    signing_secret = f.CharField(
        help_text="The secret every request to this tool is signed with "
        "(`Takeover-Signature`): shown this once."
    )


class PrincipalCreatedOut(f.Serializer):
    id = f.UUIDField()
    name = f.CharField()
    tenant = f.CharField()
    token = f.CharField(help_text="Shown once; only its hash is stored.")


class ForceReplayRequestOut(f.Serializer):
    id = f.UUIDField()
    run = f.UUIDField()
    state = f.ChoiceField(choices=["pending", "confirmed", "rejected"])
    requested_by = ActorOut()
    reason = f.CharField()
    tools_at_risk = f.ListField(child=f.CharField(), allow_null=True)
    decided_by = ActorOut(allow_null=True)
    decided_at = f.DateTimeField(allow_null=True)
    decision_reason = f.CharField(allow_null=True)
    new_run = f.UUIDField(allow_null=True)
    created_at = f.DateTimeField()


class IdempotencyConflictOut(f.Serializer):
    id = f.IntegerField()
    at = f.DateTimeField()
    principal = f.CharField()
    key = f.CharField()
    existing_action = f.UUIDField(allow_null=True)
    attempted = f.DictField(
        help_text="The refused intent: tool, target, desired_state, expected_version."
    )
    request_id = f.CharField()


class TenantSettingsOut(f.Serializer):
    four_eyes_force_replay = f.BooleanField()
    approval_sla_seconds = f.IntegerField(help_text="0: no SLA.")
    unknown_alert_seconds = f.IntegerField(help_text="0: unknown actions are not notified.")
    approval_expiry_warning_seconds = f.IntegerField(
        help_text="0: expiring requests are not notified."
    )


class BulkKeyOut(f.Serializer):
    key = f.CharField()
    tool = f.CharField()
    target = f.CharField()
    hit = f.BooleanField(
        help_text="Proposing this key again is a ledger hit: the recorded outcome is "
        "returned and nothing is sent. False: the key was revoked; it would be a new send."
    )
    state = f.CharField(allow_blank=True, help_text="The recorded action's state (a hit).")
    state_label = f.CharField(allow_blank=True)


BULK_WILL = [
    "resolve_succeeded",
    "resolve_failed",
    "recheck",
    "replay",
    "force_replay",
    "force_request",
    "skip",
]


class BulkItemOut(f.Serializer):
    id = f.UUIDField()
    kind = f.ChoiceField(choices=["action", "run"])
    label = f.CharField()
    state = f.CharField(allow_blank=True, help_text="Its state (status, for a run) now.")
    state_label = f.CharField(allow_blank=True)
    will = f.ChoiceField(choices=BULK_WILL)
    will_label = f.CharField()
    why = f.CharField(allow_blank=True)
    read_id = f.IntegerField(
        allow_null=True, help_text="resolve: the read of the authoritative state decided on."
    )
    tools = f.ListField(
        child=f.CharField(),
        allow_null=True,
        help_text="replay: the tools the run called, which a replay may call again (null: "
        "could not be established).",
    )
    keys = BulkKeyOut(many=True, help_text="replay: the fate of each key the run used.")
    hits = f.IntegerField(help_text="replay: how many of `keys` are ledger hits.")
    sends = f.IntegerField(help_text="replay: how many of `keys` would be sent again.")


class BulkPlanOut(f.Serializer):
    operation = f.ChoiceField(choices=["resolve", "recheck", "replay"])
    outcome = f.ChoiceField(choices=["succeeded", "failed"], allow_null=True)
    reason = f.CharField(allow_blank=True)
    force = f.BooleanField()
    signature = f.CharField(help_text="Pass it to /bulk/apply to confirm exactly this plan.")
    items = BulkItemOut(many=True)


class BulkResultItemOut(BulkItemOut):
    did = f.ChoiceField(choices=[*BULK_WILL, "refused"])
    did_label = f.CharField()
    detail = f.CharField(allow_blank=True)
    new_run = f.UUIDField(allow_null=True)


class BulkResultOut(f.Serializer):
    plan = BulkPlanOut()
    results = BulkResultItemOut(many=True)


class TokenOut(f.Serializer):
    id = f.UUIDField()
    label = f.CharField(help_text="The first characters, to tell tokens apart.")
    name = f.CharField()
    owner = ActorOut()
    state = f.ChoiceField(choices=["active", "revoked", "expired"])
    created_at = f.DateTimeField()
    expires_at = f.DateTimeField(allow_null=True)
    last_used_at = f.DateTimeField(allow_null=True, help_text="Written at most once a minute.")
    revoked_at = f.DateTimeField(allow_null=True)
    rotated_from = f.UUIDField(allow_null=True)


class TokenCreatedOut(TokenOut):
    token = f.CharField(help_text="Shown once; only its hash is stored.")


class MeOut(f.Serializer):
    kind = f.ChoiceField(choices=["principal", "operator"])
    name = f.CharField()
    tenant = f.CharField()
    roles = f.ListField(child=f.ChoiceField(choices=["approver", "oncall", "admin"]))


class RunStartMultipartIn(f.Serializer):
    """POST /runs as multipart/form-data, to upload an input file (copied at start)."""

    trigger = f.ChoiceField(choices=Trigger.choices)
    config = f.DictField(
        required=False, help_text="The config object, as a JSON part (`RUN_START_ENCODING`)."
    )
    session_id = f.CharField(required=False)
    input_file = f.FileField(required=False)


# The config part of a multipart POST /runs is JSON text, not a plain form value.
RUN_START_ENCODING = {"config": {"contentType": "application/json"}}


class _Const(f.Field):
    """A field whose only value is `value`: a branch of a body whose shape depends on it."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value


def const(value, **kw):
    if isinstance(value, bool):
        # Inside allOf, where the enum postprocessing hook does not collect it: two
        # one-value boolean "enums" of one field name would be named by hash.
        schema = {"allOf": [{"type": "boolean", "enum": [value]}]}
    else:
        schema = {"type": "string", "enum": [value]}
    # A class of its own per value: the schema is an attribute of the class.
    return extend_schema_field(schema)(type("Const", (_Const,), {}))(value, **kw)


class _BulkIds(f.Serializer):
    ids = f.ListField(
        child=f.UUIDField(),
        min_length=1,
        max_length=50,
        help_text="Action ids (resolve, recheck) or run ids (replay), at most 50.",
    )


def _reason(help_text):
    return f.CharField(max_length=2000, help_text=help_text)


class BulkResolveIn(_BulkIds):
    operation = const("resolve")
    outcome = f.ChoiceField(choices=["succeeded", "failed"])
    reason = _reason("Why; goes to the audit log.")


class BulkRecheckIn(_BulkIds):
    operation = const("recheck")


class BulkReplayIn(_BulkIds):
    operation = const("replay")
    force = const(False, required=False)


class BulkForceReplayIn(_BulkIds):
    operation = const("replay")
    force = const(True, help_text="Force the runs the rule refuses (admin).")
    reason = _reason("Why; goes to the audit log.")


def _with_signature(serializer):
    return type(
        serializer.__name__.replace("In", "ApplyIn"),
        (serializer,),
        {"signature": f.CharField(max_length=64, help_text="The preview's `signature`.")},
    )


def _bulk_body(name, branches):
    return PolymorphicProxySerializer(
        component_name=name, serializers=branches, resource_type_field_name=None
    )


BULK_BRANCHES = [BulkResolveIn, BulkRecheckIn, BulkReplayIn, BulkForceReplayIn]
BulkIn = _bulk_body("BulkIn", BULK_BRANCHES)
BulkApplyIn = _bulk_body("BulkApplyIn", [_with_signature(b) for b in BULK_BRANCHES])


# The egress policy's shape rules (core/egress.py): absolute http(s), a host, no user-info,
# query, fragment, space or control character. Where the host may be is the deployer's
# TOOL_URL_ALLOWLIST, which no schema can say.
HTTP_URL = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#@]+(/[^\s?#]*)?$"
PATTERNS = {("ToolInRequest", "base_url"): HTTP_URL}


def request_rules(result, generator, request, public):
    """drf-spectacular's postprocessing hook: what the serializers' types cannot say.

    - A text field is trimmed before it is checked (DRF's CharField): one made of white
      space only is blank, so a field that may not be blank needs a character that is not.
    - An optional field sent as null means "not given" (`api.views.valid`): it is nullable.
    - At most one owner for a token; at least one of effect and lookup in a declaration.
    - A body whose shape requires fields is required (the polymorphic bulk bodies).
    """
    schemas = result.get("components", {}).get("schemas", {})
    for name, component in schemas.items():
        if not name.endswith("Request"):
            continue
        required = set(component.get("required", []))
        for field, prop in component.get("properties", {}).items():
            if (
                prop.get("type") == "string"
                and prop.get("minLength", 0) >= 1
                and not {"pattern", "format", "enum"} & set(prop)
            ):
                prop["pattern"] = "\\S"
            if field not in required and not prop.get("nullable"):
                if "$ref" in prop:
                    prop["allOf"] = [{"$ref": prop.pop("$ref")}]
                prop["nullable"] = True
    for (component, field), pattern in PATTERNS.items():
        if component in schemas:
            schemas[component]["properties"][field]["pattern"] = pattern
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            ref = body and body["content"].get("application/json", {}).get("schema", {})
            target = schemas.get((ref or {}).get("$ref", "").rsplit("/", 1)[-1], {})
            if body and (target.get("required") or "oneOf" in target):
                body["required"] = True  # a body whose shape requires fields is not optional
    if (declare := schemas.get("ToolDeclareInRequest")) is not None:
        declare["anyOf"] = [
            {"properties": {"effect": {"type": "string"}}, "required": ["effect"]},
            {"properties": {"lookup": {"type": "boolean"}}, "required": ["lookup"]},
        ]
    if (token_in := schemas.get("TokenInRequest")) is not None:
        owners = ("principal", "operator")
        token_in["not"] = {
            "properties": {owner: {"type": "string"} for owner in owners},
            "required": list(owners),
        }
    return result


_pages: dict[str, type] = {}


def page_of(item) -> type:
    """`{"results": [item], "next": cursor | null}`, one component per item type."""
    name = item.__name__.removesuffix("Out") + "Page"
    if name not in _pages:
        _pages[name] = inline_serializer(
            name,
            {
                "results": item(many=True),
                "next": f.CharField(
                    allow_null=True,
                    help_text="Pass as `cursor` for the next page; null at the end.",
                ),
            },
        ).__class__
    return _pages[name]


# --- errors -------------------------------------------------------------------------------

# The `type` values each status carries, as `/problems/<slug>` (docs/design.md, "The API's
# conventions").
SLUGS = {
    400: ["validation-error"],
    401: ["unauthenticated"],
    403: ["permission-denied"],
    404: ["not-found"],
    409: ["state-conflict"],
    410: ["input-gone"],
    411: ["validation-error"],
    413: ["payload-too-large"],
    415: ["validation-error"],
    422: ["idempotency-conflict"],
    503: ["temporarily-unavailable"],
}
DESCRIPTIONS = {
    400: "Invalid input; `errors` names each field (a body field, a query parameter or a "
    "header). An operator in several tenants who sends no X-Takeover-Tenant gets it too.",
    401: "No bearer token, or an invalid or revoked one.",
    403: "The caller may not do this (principal vs operator, role, or a tenant it is not a "
    "member of).",
    404: "No such object for this caller (another tenant's object is a 404 too).",
    409: "The object's state refuses this.",
    410: "The run's input file is no longer stored.",
    411: "A chunked request body without a length that could not be read.",
    413: "The request body is too large.",
    415: "The body is neither JSON nor (where accepted) multipart.",
    422: "This Idempotency-Key was used for a different intent; nothing was created.",
    503: "A transient database or broker failure; retry after `Retry-After` seconds.",
}
RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer"},
    }
}
_problems: dict[tuple, type] = {}


def problem_serializer(status: int, slugs: list[str]) -> type:
    key = (status, tuple(slugs))
    if key not in _problems:
        name = "Problem" + str(status) + ("".join(s.title().replace("-", "") for s in slugs))
        _problems[key] = inline_serializer(
            name,
            {
                "type": f.ChoiceField(choices=[f"/problems/{s}" for s in slugs]),
                "title": f.CharField(),
                "status": f.IntegerField(help_text=f"{status}"),
                "detail": f.CharField(),
                "errors": f.DictField(
                    child=f.ListField(child=f.CharField()),
                    required=False,
                    help_text="Per field (400 only).",
                ),
            },
        ).__class__
    return _problems[key]


def errors_for(*statuses: int, slugs: dict[int, list[str]] | None = None) -> dict:
    """Problem responses for these statuses (401, 403 and 503 are always added: every
    operation authenticates, checks a role or tenant, and touches the database)."""
    out = {}
    for status in sorted({*statuses, 400, 401, 403, 503}):
        status_slugs = (slugs or {}).get(status, SLUGS[status])
        out[(status, PROBLEM)] = OpenApiResponse(
            problem_serializer(status, status_slugs),
            description=DESCRIPTIONS[status]
            + " Type: "
            + ", ".join(f"`/problems/{s}`" for s in status_slugs)
            + ".",
        )
    return out


def ok(status: int, serializer, description: str = "") -> dict:
    return {status: OpenApiResponse(serializer, description=description)}


# --- parameters ---------------------------------------------------------------------------

TENANT_HEADER = OpenApiParameter(
    "X-Takeover-Tenant",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="An operator in several tenants names one (its slug).",
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    # Visible ASCII; `""` (an empty quoted string) is the one form that is no key.
    {"type": "string", "pattern": '^(?!""$)[!-~]{1,255}$'},
    OpenApiParameter.HEADER,
    required=True,
    description="Required, except for a tool declared `read_only` (a read takes no ledger key "
    "space: without a key it is keyed `read:<action id>`, and a key it is given reserves "
    "nothing). 1–255 visible ASCII characters, bare or as an RFC 8941 quoted string, derived "
    "from stable intent (trigger event id, tool, normalized target). Scoped per tenant.",
)
CURSOR = OpenApiParameter(
    "cursor",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description="The `next` of the previous page.",
)


TOOL_NAME = "^[A-Za-z0-9_.-]{1,100}$"  # as registration allows it (api.serializers.ToolIn)


def csv_query(name: str, description: str, values=None, pattern=None) -> OpenApiParameter:
    """A comma-separated list (`state=a,b`): OpenAPI's form style, not exploded."""
    if values:
        items = {"type": "string", "enum": list(values)}
    else:
        items = {"type": "string", "pattern": pattern or "^[^,]+$"}
    return OpenApiParameter(
        name,
        # At least one: `state=` names nothing, and is refused rather than read as "all".
        {"type": "array", "items": items, "minItems": 1},
        OpenApiParameter.QUERY,
        style="form",
        explode=False,
        description=description
        + (f" Comma-separated; any of: {', '.join(values)}." if values else " Comma-separated."),
    )


def query(name: str, description: str, kind=OpenApiTypes.STR, **kw) -> OpenApiParameter:
    return OpenApiParameter(name, kind, OpenApiParameter.QUERY, description=description, **kw)


class AutoSchema(openapi.AutoSchema):
    """Every operation accepts `X-Takeover-Tenant` (operators in several tenants)."""

    def get_override_parameters(self):
        return [*super().get_override_parameters(), TENANT_HEADER]
