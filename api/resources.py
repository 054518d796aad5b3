"""The shapes API v1 answers with (and its multipart and bulk bodies), for the OpenAPI
schema (`api/schema.py`). Documentation only: the views answer with `runs.presenters`'
dicts, which these mirror field by field, and `tests/api/test_schema.py` validates real
answers against them."""

from drf_spectacular.utils import (
    PolymorphicProxySerializer,
    extend_schema_field,
)
from rest_framework import serializers

from approvals.models import ApprovalState, RequestState
from core.models import ToolEffect, ToolKind
from ledger.models import LedgerStatus
from runs.bulk import WILLS
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


def _choice(choices, **kw):
    return serializers.ChoiceField(choices=choices, **kw)


def _nullable_choice(choices):
    return serializers.ChoiceField(choices=choices, allow_null=True)


class ActorOut(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["operator", "principal", "system"])
    name = serializers.CharField()


class DiffOut(serializers.Serializer):
    field = serializers.CharField()
    desired = serializers.JSONField()
    actual = serializers.JSONField()


class AuthoritativeOut(serializers.Serializer):
    state = serializers.DictField()
    version = serializers.IntegerField()


class DeclarationOut(serializers.Serializer):
    """What a tool declared it is, as it stood when a decision relied on it."""

    effect = _choice(ToolEffect.choices)
    lookup = serializers.BooleanField(help_text="It answers GET {base_url}/effects/{key}.")
    declared_by = ActorOut(allow_null=True)
    declared_at = serializers.DateTimeField(allow_null=True)


class AttemptOut(serializers.Serializer):
    number = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    outcome = _nullable_choice(AttemptOutcome.choices)
    http_status = serializers.IntegerField(allow_null=True)
    detail = serializers.CharField(allow_blank=True)
    kind = _choice(
        AttemptKind.choices,
        help_text="`send` (the first), `safe_retry` (the previous attempt provably never "
        "left), `resend` (an unknown outcome sent again with the same Idempotency-Key, "
        "because the tool declares `idempotent` or `read_only`).",
    )
    declaration = DeclarationOut(
        allow_null=True, help_text="For a resend: the declaration that allowed it."
    )


class ReconciliationOut(serializers.Serializer):
    at = serializers.DateTimeField()
    authoritative = AuthoritativeOut(allow_null=True)
    verdict = _choice(
        Verdict.choices,
        help_text="A state read: `match`, `mismatch`, `moved_on`, `read_failed`, `missing`. "
        "A lookup (`kind: lookup`): `lookup_applied` (the tool applied the key: settles "
        "the action), `lookup_not_found` (the tool reports it never received the key), "
        "`lookup_failed` (it could not tell; the state is read instead).",
    )
    diff = DiffOut(many=True)
    expected_version = serializers.IntegerField(allow_null=True)
    actual_version = serializers.IntegerField(allow_null=True)
    detail = serializers.CharField(allow_blank=True)
    actor = ActorOut(allow_null=True)
    kind = _choice(
        ReadKind.choices,
        help_text="`state`: GET {base_url}/state/{target}; `lookup`: GET {base_url}/effects/{key}.",
    )
    declaration = DeclarationOut(
        allow_null=True, help_text="For a lookup: the declaration that made Takeover ask."
    )


class ActionOut(serializers.Serializer):
    id = serializers.UUIDField()
    run = serializers.UUIDField()
    tenant = serializers.CharField()
    principal = serializers.CharField()
    tool = serializers.CharField()
    target = serializers.CharField()
    desired_state = serializers.DictField()
    expected_version = serializers.IntegerField(allow_null=True)
    idempotency_key = serializers.CharField()
    effect = _choice(
        ToolEffect.choices,
        help_text="The tool's effect declaration when this was proposed: a `read_only` "
        "tool's action needs no approval and holds no ledger key.",
    )
    state = _choice(ActionState.choices)
    block_reason = _nullable_choice(BlockReason.choices)
    failure_reason = _nullable_choice(FailureReason.choices)
    resolution = _nullable_choice(Resolution.choices)
    resolution_reason = serializers.CharField(allow_null=True)
    approval_id = serializers.UUIDField(allow_null=True)
    approval_request_id = serializers.UUIDField(allow_null=True)
    replayed = serializers.BooleanField(help_text="True when answered from the ledger (same key).")
    content_changed = serializers.BooleanField(
        help_text="On a ledger hit: non-identity fields of desired_state differ."
    )
    attempts = AttemptOut(many=True)
    reconciliations = ReconciliationOut(many=True)
    claimed_by = serializers.CharField(
        allow_null=True, help_text="The on-call holding it in the console."
    )
    origin = _choice(
        [("api", "api"), ("mcp", "mcp"), ("cli", "cli")],
        help_text="Where it was proposed: the API, Takeover's /mcp, or the takeover CLI.",
    )
    client = serializers.CharField(
        allow_null=True, help_text="The MCP client's name (or the CLI's), when it said one."
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ActionSummaryOut(serializers.Serializer):
    id = serializers.UUIDField()
    tool = serializers.CharField()
    target = serializers.CharField()
    idempotency_key = serializers.CharField()
    state = _choice(ActionState.choices)
    block_reason = _nullable_choice(BlockReason.choices)
    failure_reason = _nullable_choice(FailureReason.choices)
    resolution = _nullable_choice(Resolution.choices)
    created_at = serializers.DateTimeField()


class InputFileOut(serializers.Serializer):
    name = serializers.CharField()
    size = serializers.IntegerField()
    sha256 = serializers.CharField()


class RunOut(serializers.Serializer):
    id = serializers.UUIDField()
    tenant = serializers.CharField()
    principal = serializers.CharField()
    trigger = _choice(Trigger.choices)
    config = serializers.DictField()
    input_file = InputFileOut(allow_null=True)
    session_id = serializers.CharField()
    status = _choice(RunStatus.choices)
    attempts = serializers.IntegerField()
    error_message = serializers.CharField(allow_blank=True)
    replay_of = serializers.UUIDField(allow_null=True)
    tools_executed = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="[] verified no tool called; a list of tools called; null unknown.",
    )
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    heartbeat_at = serializers.DateTimeField(allow_null=True)


class SafeToolOut(DeclarationOut):
    tool = serializers.CharField()
    why = serializers.CharField(help_text="Which declaration makes a repeat harmless, in words.")


class ReplayVerdictOut(serializers.Serializer):
    allowed = serializers.BooleanField(help_text="A replay without force would be created.")
    forceable = serializers.BooleanField()
    gone = serializers.BooleanField(help_text="The input file is no longer stored (410).")
    message = serializers.CharField()
    tools_at_risk = serializers.ListField(child=serializers.CharField(), allow_null=True)
    not_applied = serializers.ListField(
        child=serializers.CharField(), help_text="Called tools an operator resolved as not applied."
    )
    safe_tools = SafeToolOut(
        many=True,
        help_text="Called tools that their declarations make safe to repeat: `read_only`, "
        "or `idempotent` with every call keyed through Takeover.",
    )


class RunDetailOut(RunOut):
    actions = ActionSummaryOut(many=True)
    replay_verdict = ReplayVerdictOut(help_text="What a replay without force would answer.")


class ReplayOut(serializers.Serializer):
    id = serializers.UUIDField()
    original_run = serializers.UUIDField()
    new_run = serializers.UUIDField()
    actor = ActorOut()
    forced = serializers.BooleanField()
    reason = serializers.CharField(allow_blank=True)
    tools_at_risk = serializers.ListField(child=serializers.CharField(), allow_null=True)
    safe_tools = SafeToolOut(many=True)
    at = serializers.DateTimeField()


class BindingOut(serializers.Serializer):
    principal = serializers.CharField()
    tool = serializers.CharField()
    target = serializers.CharField()
    desired_state = serializers.DictField()
    expected_version = serializers.IntegerField(allow_null=True)


class ApprovalOut(BindingOut):
    id = serializers.UUIDField()
    state = _choice(ApprovalState.choices)
    tenant = serializers.CharField()
    expires_at = serializers.DateTimeField()
    granted_by = ActorOut()
    granted_at = serializers.DateTimeField()
    consumed_by_action = serializers.UUIDField(allow_null=True)
    consumed_at = serializers.DateTimeField(allow_null=True)
    request = serializers.UUIDField(allow_null=True, help_text="The approval request it answered.")
    revoked_at = serializers.DateTimeField(allow_null=True)
    revoke_reason = serializers.CharField(allow_null=True)


class ApprovalRequestOut(BindingOut):
    id = serializers.UUIDField()
    action = serializers.UUIDField()
    state = _choice(RequestState.choices)
    tenant = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    decided_by = ActorOut(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_null=True)


class LedgerEntryOut(serializers.Serializer):
    id = serializers.UUIDField()
    tenant = serializers.CharField()
    key = serializers.CharField()
    generation = serializers.IntegerField()
    tool = serializers.CharField()
    action = serializers.UUIDField(allow_null=True)
    status = _choice(LedgerStatus.choices)
    fingerprint = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    revoked = serializers.BooleanField()
    revoked_at = serializers.DateTimeField(allow_null=True)
    revoked_reason = serializers.CharField(allow_null=True)
    revoked_by = ActorOut(allow_null=True)


class AuditEventOut(serializers.Serializer):
    id = serializers.UUIDField()
    at = serializers.DateTimeField()
    actor = ActorOut()
    verb = serializers.CharField()
    object_type = serializers.CharField()
    object_id = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    request_id = serializers.CharField(allow_blank=True)


class ToolMcpOut(serializers.Serializer):
    tool = serializers.CharField(help_text="The upstream tool that applies the effect.")
    target_argument = serializers.CharField()
    read_tool = serializers.CharField()
    lookup_tool = serializers.CharField(allow_null=True)
    annotations = serializers.DictField(help_text="The upstream's hints, as listed.")
    suggested_effect = serializers.CharField(
        allow_null=True,
        help_text="What the hints suggest (`read_only`, `idempotent`): applied only when an "
        "admin confirms it (POST /tools/{name}/declaration).",
    )


class ToolOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    # Operators only: a principal is not told where a tool lives.
    base_url = serializers.URLField(required=False)
    effect = _choice(
        ToolEffect.choices,
        help_text="`read_only`: no side effect (no approval, no ledger key, never at risk in "
        "a replay); `idempotent`: applies an Idempotency-Key at most once and answers a "
        "repeat with the first result (an unknown outcome is re-sent with the same key); "
        "`unsafe`: neither (the default).",
    )
    lookup = serializers.BooleanField(
        help_text="Answers GET {base_url}/effects/{key}: 200 `{applied: true, state, "
        "version}` or 404; reconciliation asks it first."
    )
    declared_by = ActorOut(allow_null=True, help_text="Who made the declaration in force.")
    declared_at = serializers.DateTimeField(allow_null=True)
    requires_approval = serializers.BooleanField()
    identity_fields = serializers.ListField(child=serializers.CharField())
    timeout_seconds = serializers.FloatField()
    created_at = serializers.DateTimeField()
    # Operators only, like base_url.
    signing_secret_created_at = serializers.DateTimeField(required=False)
    previous_secret_expires_at = serializers.DateTimeField(
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
    signing_secret = serializers.CharField(
        help_text="The secret every request to this tool is signed with "
        "(`Takeover-Signature`): shown this once."
    )


class PrincipalCreatedOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    tenant = serializers.CharField()
    token = serializers.CharField(help_text="Shown once; only its hash is stored.")


class ForceReplayRequestOut(serializers.Serializer):
    id = serializers.UUIDField()
    run = serializers.UUIDField()
    state = serializers.ChoiceField(choices=["pending", "confirmed", "rejected"])
    requested_by = ActorOut()
    reason = serializers.CharField()
    tools_at_risk = serializers.ListField(child=serializers.CharField(), allow_null=True)
    decided_by = ActorOut(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    decision_reason = serializers.CharField(allow_null=True)
    new_run = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()


class IdempotencyConflictOut(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    principal = serializers.CharField()
    key = serializers.CharField()
    existing_action = serializers.UUIDField(allow_null=True)
    attempted = serializers.DictField(
        help_text="The refused intent: tool, target, desired_state, expected_version."
    )
    request_id = serializers.CharField()


class TenantSettingsOut(serializers.Serializer):
    four_eyes_force_replay = serializers.BooleanField()
    approval_sla_seconds = serializers.IntegerField(help_text="0: no SLA.")
    unknown_alert_seconds = serializers.IntegerField(
        help_text="0: unknown actions are not notified."
    )
    approval_expiry_warning_seconds = serializers.IntegerField(
        help_text="0: expiring requests are not notified."
    )


class BulkKeyOut(serializers.Serializer):
    key = serializers.CharField()
    tool = serializers.CharField()
    target = serializers.CharField()
    hit = serializers.BooleanField(
        help_text="Proposing this key again is a ledger hit: the recorded outcome is "
        "returned and nothing is sent. False: the key was revoked; it would be a new send."
    )
    state = serializers.CharField(
        allow_blank=True, help_text="The recorded action's state (a hit)."
    )
    state_label = serializers.CharField(allow_blank=True)


# What an item of the API's operations (no acknowledge: the console's alone) will do.
BULK_WILL = [will for will in WILLS if will not in ("acknowledge", "refused")]


class BulkItemOut(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.ChoiceField(choices=["action", "run"])
    label = serializers.CharField()
    state = serializers.CharField(allow_blank=True, help_text="Its state (status, for a run) now.")
    state_label = serializers.CharField(allow_blank=True)
    will = serializers.ChoiceField(choices=BULK_WILL)
    will_label = serializers.CharField()
    why = serializers.CharField(allow_blank=True)
    read_id = serializers.IntegerField(
        allow_null=True, help_text="resolve: the read of the authoritative state decided on."
    )
    tools = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="replay: the tools the run called, which a replay may call again (null: "
        "could not be established).",
    )
    keys = BulkKeyOut(many=True, help_text="replay: the fate of each key the run used.")
    hits = serializers.IntegerField(help_text="replay: how many of `keys` are ledger hits.")
    sends = serializers.IntegerField(help_text="replay: how many of `keys` would be sent again.")


class BulkPlanOut(serializers.Serializer):
    operation = serializers.ChoiceField(choices=["resolve", "recheck", "replay"])
    outcome = serializers.ChoiceField(choices=["succeeded", "failed"], allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    force = serializers.BooleanField()
    signature = serializers.CharField(
        help_text="Pass it to /bulk/apply to confirm exactly this plan."
    )
    items = BulkItemOut(many=True)


class BulkResultItemOut(BulkItemOut):
    did = serializers.ChoiceField(choices=[*BULK_WILL, "refused"])
    did_label = serializers.CharField()
    detail = serializers.CharField(allow_blank=True)
    new_run = serializers.UUIDField(allow_null=True)


class BulkResultOut(serializers.Serializer):
    plan = BulkPlanOut()
    results = BulkResultItemOut(many=True)


class TokenOut(serializers.Serializer):
    id = serializers.UUIDField()
    label = serializers.CharField(help_text="The first characters, to tell tokens apart.")
    name = serializers.CharField()
    owner = ActorOut()
    state = serializers.ChoiceField(choices=["active", "revoked", "expired"])
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(
        allow_null=True, help_text="Written at most once a minute."
    )
    revoked_at = serializers.DateTimeField(allow_null=True)
    rotated_from = serializers.UUIDField(allow_null=True)


class TokenCreatedOut(TokenOut):
    token = serializers.CharField(help_text="Shown once; only its hash is stored.")


class MeOut(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["principal", "operator"])
    name = serializers.CharField()
    tenant = serializers.CharField()
    roles = serializers.ListField(
        child=serializers.ChoiceField(choices=["approver", "oncall", "admin"])
    )


class RunStartMultipartIn(serializers.Serializer):
    """POST /runs as multipart/form-data, to upload an input file (copied at start)."""

    trigger = serializers.ChoiceField(choices=Trigger.choices)
    config = serializers.DictField(
        required=False, help_text="The config object, as a JSON part (`RUN_START_ENCODING`)."
    )
    session_id = serializers.CharField(required=False)
    input_file = serializers.FileField(required=False)


# The config part of a multipart POST /runs is JSON text, not a plain form value.
RUN_START_ENCODING = {"config": {"contentType": "application/json"}}


class _Const(serializers.Field):
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


class _BulkIds(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.UUIDField(),
        min_length=1,
        max_length=50,
        help_text="Action ids (resolve, recheck) or run ids (replay), at most 50.",
    )


def _reason(help_text):
    return serializers.CharField(max_length=2000, help_text=help_text)


class BulkResolveIn(_BulkIds):
    operation = const("resolve")
    outcome = serializers.ChoiceField(choices=["succeeded", "failed"])
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
        {"signature": serializers.CharField(max_length=64, help_text="The preview's `signature`.")},
    )


def _bulk_body(name, branches):
    return PolymorphicProxySerializer(
        component_name=name, serializers=branches, resource_type_field_name=None
    )


BULK_BRANCHES = [BulkResolveIn, BulkRecheckIn, BulkReplayIn, BulkForceReplayIn]
BulkIn = _bulk_body("BulkIn", BULK_BRANCHES)
BulkApplyIn = _bulk_body("BulkApplyIn", [_with_signature(b) for b in BULK_BRANCHES])
