"""Strict DRF fields: JSON has types, and "3" is not an integer."""

from rest_framework import serializers


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
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
        return super().to_internal_value(data)


class JSONObjectField(serializers.JSONField):
    default_error_messages = {"not_object": "Must be a JSON object."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("not_object")
        return super().to_internal_value(data)


class StringListField(serializers.ListField):
    child = StrictCharField()
