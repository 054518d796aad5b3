"""What API v1 answers, for the OpenAPI schema (docs/design.md, "The API's conventions").
Documentation only: the views answer with `runs.presenters`' dicts, and
`tests/api/test_schema.py` validates real answers against these shapes, so the two cannot
drift apart unnoticed.

- Resource serializers (`api/resources.py`) mirror the presenters field by field.
- Lists are `{"results": [...], "next": cursor | null}` (`page_of`).
- Every error is `application/problem+json`; `errors_for` documents, per operation, the
  statuses it can really answer and, per status, the `type` values it carries.
"""

from drf_spectacular import openapi
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    inline_serializer,
)
from rest_framework import serializers

PROBLEM = "application/problem+json"

# The egress policy's shape rules (core/egress.py): absolute http(s), a host, no user-info,
# query, fragment, space or control character. Where the host may be is the deployer's
# TOOL_URL_ALLOWLIST, which no schema can say.
HTTP_URL = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#@]+(/[^\s?#]*)?$"
PATTERNS = {("ToolInRequest", "base_url"): HTTP_URL}


def request_rules(result, generator, request, public):
    """drf-spectacular's postprocessing hook: what the serializers' types cannot say.

    - A text field is trimmed before it is checked (DRF's CharField): one made of white
      space only is blank, so a field that may not be blank needs a character that is not.
    - An optional field sent as null means "not given" (`api.views.common.valid`): it is nullable.
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
                "next": serializers.CharField(
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
                "type": serializers.ChoiceField(choices=[f"/problems/{s}" for s in slugs]),
                "title": serializers.CharField(),
                "status": serializers.IntegerField(help_text=f"{status}"),
                "detail": serializers.CharField(),
                "errors": serializers.DictField(
                    child=serializers.ListField(child=serializers.CharField()),
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
