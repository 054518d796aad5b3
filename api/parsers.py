"""The API's JSON parser: strict (`api/jsonsafe.py`), and its refusals name the field."""

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from core.errors import ValidationFailed
from core.jsonsafe import JSONRefused, loads


def refused(exc: JSONRefused, default_field: str = "body") -> ValidationFailed:
    return ValidationFailed(exc.message, {exc.field or default_field: [exc.message]})


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"The body is not UTF-8: {exc}") from exc
        try:
            return loads(text)
        except JSONRefused as exc:
            if exc.field is None and exc.message.startswith("Not valid JSON"):
                raise ParseError(exc.message) from exc
            raise refused(exc) from exc
