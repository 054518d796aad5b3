"""Input validation for API v1 (strict JSON types; errors name the field)."""

from rest_framework import serializers

from core.models import Role, ToolEffect, ToolKind
from runs.states import RunStatus, Trigger

from .fields import (
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictUUIDField,
    StringListField,
)

MAX_TTL_SECONDS = 30 * 24 * 3600


class RunStartIn(serializers.Serializer):
    trigger = serializers.ChoiceField(choices=Trigger.choices)
    config = JSONObjectField(required=False, default=dict)
    session_id = StrictCharField(required=False, max_length=255, allow_blank=False)


class RunStartUploadIn(RunStartIn):
    """The same as multipart/form-data, with the input file (copied at start)."""

    input_file = serializers.FileField(required=False)


class RunFinishIn(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=[RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.CANCELLED]
    )
    error_message = StrictCharField(required=False, allow_blank=True, default="", max_length=10000)
    tools_called = StringListField(required=False, allow_null=True, default=None)


class ActionProposeIn(serializers.Serializer):
    tool = StrictCharField(max_length=100)
    target = StrictCharField(max_length=500)
    desired_state = JSONObjectField()
    expected_version = StrictIntegerField(required=False, allow_null=True, default=None)
    approval_id = StrictUUIDField(required=False, allow_null=True, default=None)
    reason = StrictCharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default="",
        max_length=2000,
        help_text="The agent's own words for why (shown to approvers); not part of the intent.",
    )


class ResolveIn(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=["succeeded", "failed"])
    reason = StrictCharField(max_length=5000)
    based_on_read = StrictIntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The id of the reconciliation read the decision was made on; refused (409) "
        "unless it is the latest read. Without it, the latest read must be fresh.",
    )
    take_over = StrictBooleanField(
        required=False,
        default=False,
        help_text="Resolve an action another operator has claimed (in the console), taking it "
        "over from them. Without it, such an action is refused (409 state-conflict, naming "
        "who holds it).",
    )


class NoteIn(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=5000)


class TenantSettingsIn(serializers.Serializer):
    four_eyes_force_replay = StrictBooleanField(
        required=False, help_text="A force replay waits until a different admin confirms it."
    )
    approval_sla_seconds = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_TTL_SECONDS,
        help_text="Pending approval requests older than this are highlighted and escalated "
        "through the notifications (0: off).",
    )
    unknown_alert_seconds = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_TTL_SECONDS,
        help_text="An action unknown for longer than this is notified, once (0: never).",
    )
    approval_expiry_warning_seconds = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_TTL_SECONDS,
        help_text="A pending approval request is notified once when it has less than this "
        "left before it expires (0: never).",
    )


class AcknowledgeIn(serializers.Serializer):
    note = StrictCharField(required=False, allow_blank=True, default="", max_length=5000)


class ReasonIn(serializers.Serializer):
    reason = StrictCharField(max_length=5000)


class GrantIn(serializers.Serializer):
    ttl_seconds = StrictFloatField(
        min_value=1, max_value=MAX_TTL_SECONDS, required=False, default=3600
    )


class ApprovalIn(serializers.Serializer):
    principal = StrictCharField(max_length=100)
    tool = StrictCharField(max_length=100)
    target = StrictCharField(max_length=500)
    desired_state = JSONObjectField()
    expected_version = StrictIntegerField(required=False, allow_null=True, default=None)
    ttl_seconds = StrictFloatField(
        min_value=1, max_value=MAX_TTL_SECONDS, required=False, default=3600
    )


class ReplayIn(serializers.Serializer):
    force = StrictBooleanField(required=False, default=False)
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=5000)


class ToolIn(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z0-9_.-]{1,100}$")
    # The shape and destination rules are the egress policy's, in the service (core/egress.py).
    base_url = StrictCharField(max_length=500)
    effect = serializers.ChoiceField(
        choices=ToolEffect.choices,
        required=False,
        default="unsafe",
        help_text="What the tool is: `read_only`, `idempotent` or `unsafe`.",
    )
    lookup = StrictBooleanField(
        required=False,
        default=False,
        help_text="The tool answers GET {base_url}/effects/{key} (200 applied, 404 never seen).",
    )
    requires_approval = StrictBooleanField(required=False, default=False)
    identity_fields = StringListField(required=False, default=list)
    timeout_seconds = StrictFloatField(min_value=0.1, max_value=300, required=False, default=10)
    kind = serializers.ChoiceField(
        choices=ToolKind.choices,
        required=False,
        default="http",
        help_text="`http`: speaks the tool protocol at base_url; `mcp`: a tool of the MCP "
        "server whose Streamable HTTP endpoint is base_url (then `mcp` is required).",
    )
    mcp = JSONObjectField(
        required=False,
        help_text="For `kind: mcp`: `tool` (the upstream tool that applies), "
        "`target_argument` (which of its arguments is the target), `read_tool` and "
        '`read_arguments` ("{target}" replaced), optionally `lookup_tool` and '
        '`lookup_arguments` ("{key}", "{target}" replaced). The upstream\'s annotations '
        "become a suggested declaration an admin confirms; the tool is `unsafe` until then.",
    )

    def validate(self, data):
        if data.get("kind") == "mcp" and not data.get("mcp"):
            raise serializers.ValidationError({"mcp": ["Required for an MCP tool."]})
        if data.get("kind", "http") == "http" and data.get("mcp"):
            raise serializers.ValidationError({"mcp": ["Only for kind: mcp."]})
        if data.get("kind") == "mcp" and data.get("effect", "unsafe") != "unsafe":
            raise serializers.ValidationError(
                {"effect": ["An MCP tool starts unsafe; confirm its suggested declaration."]}
            )
        return data


class ToolRotateSecretIn(serializers.Serializer):
    overlap_seconds = StrictFloatField(
        required=False,
        default=0,
        min_value=0,
        max_value=7 * 24 * 3600,
        help_text="How long requests are still signed with the old secret too (0: stop now).",
    )
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=5000)


class ToolDeclareIn(serializers.Serializer):
    """Change a tool's declarations: name at least one of `effect` and `lookup`."""

    effect = serializers.ChoiceField(choices=ToolEffect.choices, required=False)
    lookup = StrictBooleanField(required=False)
    reason = StrictCharField(max_length=5000, help_text="Why the claim changed (audited).")

    def validate(self, data):
        if "effect" not in data and "lookup" not in data:
            raise serializers.ValidationError(
                {"effect": ["Name at least one of effect and lookup."]}
            )
        return data


class PrincipalIn(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z0-9_.-]{1,100}$")


class OperatorRoleIn(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


MAX_TOKEN_LIFETIME_SECONDS = 5 * 365 * 24 * 3600


def token_lifetime() -> StrictFloatField:
    """A new token's `expires_in_seconds`: a minute at least, five years at most."""
    return StrictFloatField(
        required=False,
        allow_null=True,
        default=None,
        min_value=60,
        max_value=MAX_TOKEN_LIFETIME_SECONDS,
    )


class TokenIn(serializers.Serializer):
    """At most one owner: `principal` (a name in this tenant; admin), or `operator` (your own
    username: nobody receives another person's secret); none: a token for yourself."""

    principal = StrictCharField(required=False, max_length=100)
    operator = StrictCharField(required=False, max_length=150)
    name = StrictCharField(required=False, allow_blank=True, default="", max_length=100)
    expires_in_seconds = token_lifetime()

    def validate(self, data):
        if data.get("principal") and data.get("operator"):
            raise serializers.ValidationError(
                {"principal": ["Name at most one owner: principal or operator."]}
            )
        return data


class TokenRotateIn(serializers.Serializer):
    expires_in_seconds = token_lifetime()
    overlap_seconds = StrictFloatField(
        required=False, default=0, min_value=0, max_value=7 * 24 * 3600
    )
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=5000)


class OptionalReasonIn(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=5000)


class BulkIn(serializers.Serializer):
    operation = serializers.ChoiceField(choices=["resolve", "recheck", "replay"])
    ids = serializers.ListField(
        child=StrictUUIDField(),
        min_length=1,
        max_length=50,
        help_text="Action ids (resolve, recheck) or run ids (replay), at most 50.",
    )
    outcome = serializers.ChoiceField(
        choices=["succeeded", "failed"],
        required=False,
        allow_null=True,
        default=None,
        help_text="resolve only.",
    )
    reason = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=2000,
        help_text="Required to resolve and to force; goes to the audit log.",
    )
    force = StrictBooleanField(
        required=False,
        default=False,
        help_text="replay only: force the runs the rule refuses (admin, with a reason).",
    )


class BulkApplyIn(BulkIn):
    signature = StrictCharField(
        max_length=64, help_text="The `signature` of the preview being confirmed."
    )
