"""Property-based fuzzing of every API operation from its own OpenAPI schema (schemathesis),
with a principal's, an on-call's and an admin's token: no input may make a 5xx.

Through the whole Django WSGI stack (middleware, DRF, parsers, the database), in this
process. The budget: schemathesis' coverage phase (boundary and negative values of every
parameter, about 900 cases in all) plus EXAMPLES fuzzed cases per operation, each case sent
with one of the three tokens in turn; about 40 seconds.

Conformance: CHECKS lists what is asserted: `not_a_server_error` (the review's finding),
and conformance to the schema (response bodies, headers, status codes and media types: the
typed schema declares every status the API really answers). STATUS_AND_MEDIA_TYPE is one
line to comment out if a schema change ever needs them off while it is fixed.
"""

import itertools

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
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
# The tokens, taken in turn: every operation gets well over three cases (the coverage
# phase's boundary and negative cases, then EXAMPLES fuzzed ones), so each is called with
# all three.
PERSONAS = itertools.cycle(["agent", "oncall", "admin"])


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
    token = getattr(fuzz_world, next(PERSONAS)).token
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
