"""Input validation for API v1 (strict JSON types; errors name the field)."""

from rest_framework import serializers

from core.api.fields import (
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictUUIDField,
    StringListField,
)
from core.models import Role, ToolEffect
from runs.states import RunStatus, Trigger

MAX_TTL_SECONDS = 30 * 24 * 3600


class RunStartIn(serializers.Serializer):
    trigger = serializers.ChoiceField(choices=Trigger.choices)
    config = JSONObjectField(required=False, default=dict)
    session_id = StrictCharField(required=False, max_length=255, allow_blank=False)
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


class ResolveIn(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=["succeeded", "failed"])
    reason = StrictCharField(max_length=5000)


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
    effect = serializers.ChoiceField(choices=ToolEffect.choices, required=False, default="unsafe")
    requires_approval = StrictBooleanField(required=False, default=False)
    identity_fields = StringListField(required=False, default=list)
    timeout_seconds = StrictFloatField(min_value=0.1, max_value=300, required=False, default=10)


class PrincipalIn(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z0-9_.-]{1,100}$")


class OperatorRoleIn(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)
