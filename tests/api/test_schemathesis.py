"""Property-based fuzzing of every API operation from its own OpenAPI schema (schemathesis),
with a principal's, an approver's, an on-call's and an admin's token: no input may make a
5xx, and the schema and the server agree both ways.

Through the whole Django WSGI stack (middleware, DRF, parsers, the database), in this
process. Both generation modes: positive (schema-valid requests, which must be accepted:
`positive_data_acceptance`) and negative (schema-violating ones, which must be refused:
`negative_data_rejection`). The budget: schemathesis' coverage phase (boundary and negative
values of every parameter) plus EXAMPLES fuzzed cases per operation and mode, each case sent
with one of the four tokens in turn; derandomized, so a run is reproducible. (A run with
EXAMPLES = 60 and random seeds also found nothing.)

What a schema cannot say, and how a case is told:
- which names exist, where the deployer lets tools live (TOOL_URL_ALLOWLIST) and which
  cursors the API issued: a positive case names what the fuzz world has and starts at the
  first page (`refer_to_what_exists`);
- that PostgreSQL stores neither NUL nor a lone surrogate anywhere in a JSON document
  (OpenAPI 3.0 cannot constrain the keys of a free-form object): generated text is UTF-8
  without NUL (`allow_x00=False`, `codec="utf-8"`); tests/api/test_bad_input.py sends both.
"""

import itertools

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import make_world

EXAMPLES = 8

STATUS_AND_MEDIA_TYPE = [
    status_code_conformance,
    content_type_conformance,
]
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    response_headers_conformance,
    *STATUS_AND_MEDIA_TYPE,
    positive_data_acceptance,
    negative_data_rejection,
]


def load_schema():
    """The schema /api/v1/schema/ serves, built the same way but without a request (so at
    collection, before any database access is allowed); cases go to the WSGI application.
    (schemathesis' lazy `from_fixture` loader does not work with this pytest.)"""
    from drf_spectacular.generators import SchemaGenerator

    loaded = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
    loaded.app = get_wsgi_application()
    return loaded


schema = load_schema()
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], allow_x00=False, codec="utf-8"
)
# The tokens, taken in turn: every operation gets well over four cases (the coverage
# phase's boundary and negative cases, then EXAMPLES fuzzed ones), so each is called with
# all four.
PERSONAS = itertools.cycle(["agent", "oncall", "admin", "approver"])


@pytest.fixture(scope="module")
def fuzz_world(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        world = make_world()
        world.tool("update_ticket", base_url="http://127.0.0.1:9/tickets")
    return world


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_input_makes_a_server_error(case, fuzz_world, live_db):
    persona = getattr(fuzz_world, next(PERSONAS))
    refer_to_what_exists(case, persona)
    send_blank_form_fields(case)
    case.call_and_validate(headers={"Authorization": f"Bearer {persona.token}"}, checks=CHECKS)


EXISTING = {"tool": "update_ticket", "principal": "agent", "base_url": "http://127.0.0.1:9/t"}


def send_blank_form_fields(case):
    """werkzeug's multipart encoder, which schemathesis sends forms with, writes an empty
    field without the line break that ends it, so the server's parser never sees the field:
    a case for a blank `session_id` reached the server as one without it, rightly accepted
    (201), and failed `negative_data_rejection`. A blank field goes as one space instead,
    which is blank to the API as well (its text fields trim)."""
    if case.media_type == "multipart/form-data" and isinstance(case.body, dict):
        for field, value in case.body.items():
            if value == "":
                case.body[field] = " "


def refer_to_what_exists(case, persona):
    """A schema says what a request looks like, not which names exist, where the deployer
    lets tools live, which MCP servers answer, or which cursors the API issued: a valid
    (positive) case names what the fuzz world has, and starts at the first page."""
    if not case.meta.generation.mode.is_positive:
        return
    if isinstance(case.body, dict):
        for field, value in EXISTING.items():
            if isinstance(case.body.get(field), str):
                case.body[field] = value
        if isinstance(case.body.get("operator"), str):
            case.body["operator"] = persona.username
        if case.path == "/api/v1/tools" and case.method == "POST":
            # An MCP tool is registered from its server's own listing, which needs a live
            # MCP server (tests/gateway registers them against the demo one): the fuzz
            # registers HTTP tools.
            case.body.pop("mcp", None)
            case.body["kind"] = "http"
    if case.query:
        case.query.pop("cursor", None)
