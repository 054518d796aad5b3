"""Strict DRF fields: JSON has types, and "3" is not an integer; and nothing passes that
PostgreSQL would refuse (NUL, lone surrogates, integers outside 64 bits, deep nesting)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.jsonsafe import MAX_DEPTH, bad_string, problem_in

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer that fits a PostgreSQL bigint."""

    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", INT64_MIN)
        kwargs.setdefault("max_value", INT64_MAX)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    default_error_messages = {"unstorable": "This text {why}."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if (why := bad_string(data)) is not None:
            self.fail("unstorable", why=why)
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictFloatField(serializers.FloatField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        try:
            value = float(data)
        except OverflowError:
            self.fail("invalid")
        if value != value or value in (float("inf"), float("-inf")):
            self.fail("invalid")
        return super().to_internal_value(value)


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(serializers.JSONField):
    """A JSON object PostgreSQL can store as jsonb: no NUL, no lone surrogate, at most
    MAX_DEPTH levels deep (counting the object itself)."""

    default_error_messages = {
        "not_object": "Must be a JSON object.",
        "unstorable": "Cannot be stored: {why}.",
    }

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("not_object")
        if (why := problem_in(data, limit=MAX_DEPTH - 1)) is not None:
            self.fail("unstorable", why=why)
        return super().to_internal_value(data)


class StringListField(serializers.ListField):
    child = StrictCharField()


class StrictUUIDField(serializers.UUIDField):
    """A UUID as a JSON string: DRF's own also takes an integer (its 128-bit value)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)
