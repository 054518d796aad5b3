"""What every API view does the same way: the Idempotency-Key, a body validated into
fields (a null optional field is "not given"), a keyset page, list parameters."""

import re
import threading

from rest_framework.response import Response

from core.errors import ValidationFailed
from core.pagination import keyset_page

RUN_409 = {409: ["run-not-running", "state-conflict"]}


# --- helpers ---------------------------------------------------------------------------

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
SF_STRING = re.compile(r'^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$')


def idempotency_key(request, *, required: bool = True) -> str | None:
    """The Idempotency-Key header, bare or as an RFC 8941 sf-string; returned bare. Without
    the header: a 400, or None when not `required` (a read_only tool's proposal)."""
    raw = request.headers.get("Idempotency-Key")
    if raw is None:
        if not required:
            return None
        raise IdempotencyKeyMissing()
    raw = raw.strip()
    if quoted := SF_STRING.match(raw):
        raw = re.sub(r"\\([\"\\])", r"\1", quoted.group(1))
    if not IDEMPOTENCY_KEY.match(raw):
        raise ValidationFailed(
            "The Idempotency-Key header is malformed.",
            {"Idempotency-Key": ["1–255 visible ASCII characters, bare or as a quoted string."]},
        )
    return raw


class IdempotencyKeyMissing(ValidationFailed):
    slug = "idempotency-key-missing"
    title = "Idempotency-Key missing"

    def __init__(self):
        super().__init__(
            "A side-effecting request must carry an Idempotency-Key header derived from "
            "stable intent.",
            {"Idempotency-Key": ["This header is required."]},
        )


_serializers = threading.local()


def _serializer(serializer_class):
    """A serializer of `serializer_class` with nothing validated yet, built once per thread:
    building one deep-copies every declared field (profiled: a tenth of a proposal's CPU).
    Its bound fields hold no state between validations; what a validation leaves on the
    serializer itself is dropped here."""
    built = _serializers.__dict__.setdefault("built", {})
    serializer = built.get(serializer_class)
    if serializer is None:
        serializer = built[serializer_class] = serializer_class()
    for name in ("initial_data", "_validated_data", "_errors", "_data"):
        serializer.__dict__.pop(name, None)
    return serializer


def valid(serializer_class, data):
    """Validated fields. An optional field sent as null means "not given" (docs/design.md,
    "The API's conventions"), unless the field gives null a meaning of its own (tools_called,
    expected_version, approval_id)."""
    serializer = _serializer(serializer_class)
    fields = serializer.fields
    serializer.initial_data = {
        name: value
        for name, value in data.items()
        if not (
            value is None
            and name in fields
            and not fields[name].required
            and not fields[name].allow_null
        )
    }
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def body_object(request) -> dict:
    data = request.data
    if not isinstance(data, dict):
        raise ValidationFailed(
            "The body must be a JSON object.", {"body": ["Must be a JSON object."]}
        )
    return data


def page(request, qs, present_one=None, *, many=None, newest_first=True, field="created_at"):
    """One keyset page of `qs`, each row presented by `present_one`, or the whole page at
    once by `many` (when a row would otherwise cost a query of its own)."""
    rows, next_cursor = keyset_page(
        qs, request.query_params.get("cursor"), newest_first=newest_first, field=field
    )
    results = many(rows) if many else [present_one(r) for r in rows]
    return Response({"results": results, "next": next_cursor})


def csv_param(request, name, allowed=None, pattern=None) -> list[str]:
    """A comma-separated query parameter (`schema.csv_query`): values of `allowed`, or each
    matching `pattern`; `name=` names nothing and is a 400, like any value outside."""
    raw = request.query_params.get(name)
    if raw == "":
        raise ValidationFailed(f"Empty {name}.", {name: ["Name at least one, or leave it out."]})
    values = (raw or "").split(",") if raw else []
    if allowed is not None and (bad := [v for v in values if v not in allowed]):
        raise ValidationFailed(
            f"Unknown {name}.", {name: [f"{', '.join(bad)} not in {', '.join(allowed)}."]}
        )
    if pattern is not None and (bad := [v for v in values if not re.fullmatch(pattern, v)]):
        raise ValidationFailed(f"Bad {name}.", {name: [f"Not a name: {', '.join(bad)}."]})
    return values


JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def choice_param(request, name, allowed) -> str | None:
    """One value of `allowed`, or None when absent; anything else is a 400 naming it."""
    value = request.query_params.get(name)
    if value is not None and value not in allowed:
        raise ValidationFailed(f"Unknown {name}.", {name: [f"One of {', '.join(allowed)}."]})
    return value
