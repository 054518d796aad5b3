"""Input is validated before anything is written (docs/design.md, "The API's conventions"):
every input class the security review turned into a 500 is a 400 naming the field, and
leaves no row, no audit event and no file behind. Through the whole Django stack
(middleware, DRF, the parsers)."""

import base64
import json
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from approvals.models import Approval
from core.models import AuditEvent, Tool
from ledger.models import LedgerEntry
from runs.models import Action, Run

from ..conftest import problem

NUL = "a\u0000b"
SURROGATE = "a\ud800b"


def deep(levels: int):
    """An object nested `levels` deep, as JSON text (json.dumps would recurse)."""
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


def as_json_text(value) -> str:
    # ensure_ascii keeps a lone surrogate as \\ud800, exactly as a client would send it.
    return json.dumps(value, ensure_ascii=True)


@pytest.fixture
def w(world):
    world.tool("update_ticket")
    world.run = world.start_run()
    return world


def inputs_files() -> set[str]:
    root = Path(settings.STORAGES["default"]["OPTIONS"]["location"])
    return {str(p) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def written(w):
    return (
        Run.objects.filter(tenant=w.tenant).count(),
        Action.objects.filter(tenant=w.tenant).count(),
        LedgerEntry.objects.filter(tenant=w.tenant).count(),
        Approval.objects.filter(tenant=w.tenant).count(),
        Tool.objects.filter(tenant=w.tenant).count(),
        AuditEvent.objects.filter(tenant=w.tenant).count(),
        len(inputs_files()),
    )


def post_raw(client, path, text, **headers):
    return client.post(path, text, content_type="application/json", **headers)


def assert_refused(w, before, response, field):
    assert 400 <= response.status_code < 500, (response.status_code, response.content)
    body = problem(response)
    assert body["status"] == response.status_code and body["title"] and body["detail"]
    assert field in body.get("errors", {}), body
    assert written(w) == before


# --- JSON bodies: NUL, lone surrogates, deep nesting, 64-bit integers -----------------------

PROPOSAL = {"tool": "update_ticket", "target": "ticket:1", "desired_state": {"status": "x"}}
APPROVAL = {
    "principal": "agent",
    "tool": "update_ticket",
    "target": "ticket:1",
    "desired_state": {"status": "x"},
}

BAD_JSON = {
    "nul in a value": lambda: {"note": NUL},
    "nul in a key": lambda: {NUL: 1},
    "nul deep inside": lambda: {"a": [{"b": NUL}]},
    "lone surrogate in a value": lambda: {"note": SURROGATE},
    "lone surrogate in a key": lambda: {SURROGATE: 1},
}


def endpoints(w):
    """(client, path, body, field, extra headers) for every endpoint taking a JSON object."""
    key = {"HTTP_IDEMPOTENCY_KEY": f"k-{uuid.uuid4().hex}"}
    return {
        "run config": (w.agent.client(), "/api/v1/runs", {"trigger": "api"}, "config", {}),
        "proposal desired_state": (
            w.agent.client(),
            f"/api/v1/runs/{w.run['id']}/actions",
            dict(PROPOSAL),
            "desired_state",
            key,
        ),
        "approval desired_state": (
            w.approver.client(),
            "/api/v1/approvals",
            dict(APPROVAL),
            "desired_state",
            {},
        ),
    }


@pytest.mark.parametrize(
    "where", ["run config", "proposal desired_state", "approval desired_state"]
)
@pytest.mark.parametrize("case", list(BAD_JSON))
def test_json_postgresql_cannot_store_is_a_400_naming_the_field(w, where, case):
    client, path, body, field, headers = endpoints(w)[where]
    body[field] = BAD_JSON[case]()
    before = written(w)
    response = post_raw(client, path, as_json_text(body), **headers)
    assert_refused(w, before, response, field)
    assert response.status_code == 400


@pytest.mark.parametrize(
    "where", ["run config", "proposal desired_state", "approval desired_state"]
)
@pytest.mark.parametrize("levels", [65, 1000, 100_000])
def test_deep_nesting_is_a_400_naming_the_field(w, where, levels):
    client, path, body, field, headers = endpoints(w)[where]
    body[field] = "@@"
    text = as_json_text(body).replace('"@@"', deep(levels))
    before = written(w)
    response = post_raw(client, path, text, **headers)
    assert_refused(w, before, response, field)


def test_sixty_three_levels_inside_a_field_are_fine(w):
    text = as_json_text({"trigger": "api", "config": "@@"}).replace('"@@"', deep(63))
    assert post_raw(w.agent.client(), "/api/v1/runs", text).status_code == 201


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target", NUL),
        ("target", SURROGATE),
        ("tool", NUL),
        ("expected_version", 2**63),
        ("expected_version", -(2**63) - 1),
        ("expected_version", 10**30),
        ("approval_id", 12345),
    ],
)
def test_proposal_fields_postgresql_would_refuse_are_400s(w, field, value):
    before = written(w)
    response = post_raw(
        w.agent.client(),
        f"/api/v1/runs/{w.run['id']}/actions",
        as_json_text({**PROPOSAL, field: value}),
        HTTP_IDEMPOTENCY_KEY=f"k-{uuid.uuid4().hex}",
    )
    assert_refused(w, before, response, field)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target", NUL),
        ("expected_version", 2**63),
        ("expected_version", -(2**63) - 1),
        ("ttl_seconds", 10**400),
        ("principal", SURROGATE),
    ],
)
def test_approval_fields_postgresql_would_refuse_are_400s(w, field, value):
    before = written(w)
    text = as_json_text({**APPROVAL, field: "@@"}).replace(
        '"@@"', str(value) if isinstance(value, int) else as_json_text(value)
    )
    response = post_raw(w.approver.client(), "/api/v1/approvals", text)
    assert_refused(w, before, response, field)


def test_the_largest_64_bit_expected_version_is_accepted(w):
    response = post_raw(
        w.agent.client(),
        f"/api/v1/runs/{w.run['id']}/actions",
        as_json_text({**PROPOSAL, "expected_version": 2**63 - 1, "target": "t-max"}),
        HTTP_IDEMPOTENCY_KEY=f"k-{uuid.uuid4().hex}",
    )
    assert response.status_code == 201, response.content


@pytest.mark.parametrize(
    ("path_of", "field", "body"),
    [
        (lambda w: "/api/v1/runs", "session_id", {"trigger": "api", "session_id": NUL}),
        (
            lambda w: f"/api/v1/runs/{w.run['id']}/finish",
            "error_message",
            {"status": "error", "error_message": NUL},
        ),
        (
            lambda w: f"/api/v1/runs/{w.run['id']}/finish",
            "tools_called",
            {"status": "error", "tools_called": [SURROGATE]},
        ),
    ],
)
def test_agent_text_fields_with_nul_or_surrogates_are_400s(w, path_of, field, body):
    before = written(w)
    response = post_raw(w.agent.client(), path_of(w), as_json_text(body))
    assert_refused(w, before, response, field)
    assert Run.objects.get(pk=w.run["id"]).status == "running"


@pytest.mark.parametrize(
    ("path_of", "field", "body"),
    [
        (lambda w: "/api/v1/tokens", "name", {"principal": "agent", "name": NUL}),
        (lambda w: "/api/v1/tokens", "principal", {"principal": SURROGATE}),
        (lambda w: "/api/v1/settings", "approval_sla_seconds", {"approval_sla_seconds": 2**63}),
        (
            lambda w: f"/api/v1/actions/{w.action_id}/resolve",
            "based_on_read",
            {"outcome": "failed", "reason": "x", "based_on_read": 2**63},
        ),
        (
            lambda w: f"/api/v1/actions/{w.action_id}/resolve",
            "reason",
            {"outcome": "failed", "reason": NUL},
        ),
    ],
)
def test_operator_fields_postgresql_would_refuse_are_400s(w, path_of, field, body):
    """The endpoints added later (tokens, tenant settings, resolving on a read)
    follow the same rules."""
    from core.models import ApiToken

    # Awaiting approval: no worker moves it (or writes its audit) while the test counts.
    w.tool("close_ticket", requires_approval=True)
    proposed = w.propose(
        w.run["id"], f"k-{uuid.uuid4().hex}", tool="close_ticket", target="t", desired_state={}
    )
    assert proposed.json()["state"] == "awaiting_approval", proposed.content
    w.action_id = proposed.json()["id"]
    tokens = ApiToken.objects.count()
    before = written(w)
    response = post_raw(w.admin.client(), path_of(w), as_json_text(body))
    assert_refused(w, before, response, field)
    assert ApiToken.objects.count() == tokens
    w.tenant.refresh_from_db()
    assert w.tenant.approval_sla_seconds == 0


def test_duplicate_keys_are_refused(w):
    before = written(w)
    text = '{"trigger": "api", "config": {"a": 1, "a": 2}}'
    assert_refused(w, before, post_raw(w.agent.client(), "/api/v1/runs", text), "config")
    text = '{"trigger": "api", "trigger": "chat"}'
    assert_refused(w, before, post_raw(w.agent.client(), "/api/v1/runs", text), "trigger")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_is_not_json(w, constant):
    before = written(w)
    text = f'{{"trigger": "api", "config": {{"x": {constant}}}}}'
    response = post_raw(w.agent.client(), "/api/v1/runs", text)
    assert response.status_code == 400
    assert problem(response)["errors"]
    assert written(w) == before


# --- multipart POST /runs: the same rules, and no file left behind --------------------------


@pytest.mark.parametrize(
    ("field", "form"),
    [
        ("config", {"config": as_json_text({"note": NUL})}),
        ("config", {"config": as_json_text({"note": SURROGATE})}),
        ("config", {"config": deep(65)}),
        ("config", {"config": deep(100_000)}),
        ("config", {"config": '{"a": 1, "a": 2}'}),
        ("config", {"config": "not json"}),
        ("session_id", {"session_id": NUL}),
    ],
)
def test_a_failing_multipart_run_writes_no_row_and_no_file(w, field, form):
    from django.core.files.uploadedfile import SimpleUploadedFile

    before = written(w)
    upload = SimpleUploadedFile("input.csv", b"a,b\n1,2\n", content_type="text/csv")
    response = w.agent.client().post(
        "/api/v1/runs", {"trigger": "api", "input_file": upload, **form}, format="multipart"
    )
    assert_refused(w, before, response, field)


# --- cursors and query filters --------------------------------------------------------------

LISTS = [
    ("agent", "/api/v1/runs"),
    ("admin", "/api/v1/replays"),
    ("oncall", "/api/v1/queue"),
    ("approver", "/api/v1/approval-requests"),
    ("approver", "/api/v1/approvals"),
    ("admin", "/api/v1/ledger"),
    ("admin", "/api/v1/audit"),
    ("admin", "/api/v1/tools"),
]


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


CRAFTED = [
    b64("2026-01-01T00:00:00+00:00|zzz"),
    b64("2026-01-01T00:00:00|" + str(uuid.uuid4())),  # naive
    b64("9999-12-31T23:59:59+00:00|" + "a" * 10_000),
    b64("2026-01-01T00:00:00+00:00|\u0000"),
    b64("x"),
    "%00",
    "!!!",
]


@pytest.mark.parametrize(("who", "path"), LISTS)
def test_a_crafted_cursor_is_a_400_naming_it(w, who, path):
    client = getattr(w, who).client()
    assert client.get(path).status_code == 200
    for cursor in CRAFTED:
        response = client.get(f"{path}?cursor={cursor}")
        assert response.status_code == 400, (cursor, response.content)
        assert "cursor" in problem(response)["errors"]


@pytest.mark.parametrize(
    ("who", "path", "param"),
    [
        ("oncall", "/api/v1/queue", "tool"),
        ("admin", "/api/v1/ledger", "key"),
        ("admin", "/api/v1/ledger", "tool"),
        ("admin", "/api/v1/audit", "verb"),
        ("admin", "/api/v1/audit", "actor"),
        ("admin", "/api/v1/audit", "object"),
        ("agent", "/api/v1/runs", "status"),
        ("approver", "/api/v1/approval-requests", "state"),
    ],
)
def test_a_nul_in_a_query_filter_is_a_400_naming_it(w, who, path, param):
    response = getattr(w, who).client().get(f"{path}?{param}=%00")
    assert response.status_code == 400, response.content
    assert param in problem(response)["errors"]


def console(persona) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=persona.username))
    return client


@pytest.mark.parametrize("path", ["/", "/runs/", "/audit/", "/replays/", "/approvals/"])
def test_the_console_survives_crafted_cursors_and_nul_filters(w, path):
    client = console(w.admin)
    for cursor in CRAFTED:
        if cursor == "%00":
            continue  # a NUL: the filter rule below
        response = client.get(f"{path}?after={cursor}")
        assert response.status_code == 200, (cursor, response.status_code)
    for param in ("tool", "state", "verb", "key", "after"):
        response = client.get(f"{path}?{param}=%00")
        assert response.status_code == 400
        assert param in problem(response)["errors"]


def test_a_console_take_over_from_a_huge_user_id_takes_nothing_over(w):
    from tests.console.conftest import make_needs_human

    action = make_needs_human(w)
    client = console(w.oncall)
    for value in (str(2**31), str(2**63), "9" * 40, "²", "-1"):
        response = client.post(f"/actions/{action.pk}/claim/", {"take_over_from": value})
        assert response.status_code in (200, 303), (value, response.status_code)
    assert Action.objects.get(pk=action.pk).claimed_by.username == w.oncall.username


def test_a_console_approval_sla_that_is_not_plain_digits_is_refused_not_a_500(w):
    client = console(w.admin)
    for value in ("²", "0" * 5000, "1e3", "-5", str(2**63)):
        response = client.post("/settings/", {"approval_sla_minutes": value})
        assert response.status_code in (200, 303), (value[:10], response.status_code)
    w.tenant.refresh_from_db()
    assert w.tenant.approval_sla_seconds == 0


def test_an_input_file_does_not_outlive_a_run_row_that_failed_to_commit(w):
    """The copy is written before the row; here the row's INSERT really fails (its principal
    is locked by another transaction, and the lock wait times out): the copy goes too."""
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.db import connection, connections, transaction

    before = written(w)
    upload = SimpleUploadedFile("input.csv", b"a,b\n1,2\n", content_type="text/csv")
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '300ms'")
    try:
        with transaction.atomic(using="owner"), connections["owner"].cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM core_principal WHERE id = %s FOR UPDATE", [w.principal.pk]
            )
            response = w.agent.client().post(
                "/api/v1/runs", {"trigger": "api", "input_file": upload}, format="multipart"
            )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '10s'")
    assert response.status_code == 503, response.content
    assert problem(response)["type"] == "/problems/temporarily-unavailable"
    assert written(w) == before  # no row, no audit event, no file


# --- the second review: five input classes that answered 500 --------------------------------


@pytest.mark.parametrize(
    ("who", "method", "path_of", "field"),
    [
        ("oncall", "post", lambda w, a: f"/api/v1/actions/{a}/resolve", "outcome"),
        ("admin", "post", lambda w, a: "/api/v1/tools", "effect"),
        ("admin", "post", lambda w, a: "/api/v1/tools/update_ticket/declaration", "effect"),
        ("oncall", "post", lambda w, a: "/api/v1/bulk/preview", "operation"),
        ("agent", "post", lambda w, a: f"/api/v1/runs/{w.run['id']}/finish", "status"),
        ("agent", "post", lambda w, a: "/api/v1/runs", "trigger"),
    ],
)
def test_a_lone_surrogate_in_an_enum_field_is_a_400_naming_it(w, who, method, path_of, field):
    from tests.builders import make_needs_human

    action = make_needs_human(w)
    base = {
        "outcome": {"outcome": "failed", "reason": "r"},
        "effect": {"name": "t2", "base_url": "http://127.0.0.1:9/x", "reason": "r"},
        "operation": {"ids": [str(action.pk)]},
        "status": {},
        "trigger": {},
    }[field]
    before = written(w)
    body = as_json_text({**base, field: SURROGATE})
    response = getattr(getattr(w, who).client(), method)(
        path_of(w, action.pk), body, content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert field in problem(response)["errors"]
    assert "\\ud800" in json.dumps(problem(response)["errors"][field])
    assert written(w) == before


def test_a_cursor_of_another_list_is_a_400_and_integer_lists_follow_their_own(w):
    """/idempotency-conflicts is keyed by an integer id: a well-formed (time, uuid) cursor
    from another list is a 400 naming it, and its own `next` cursor is followed."""
    admin = w.admin.client()
    foreign = b64(f"2026-01-01T00:00:00+00:00|{uuid.uuid4()}")
    response = admin.get(f"/api/v1/idempotency-conflicts?cursor={foreign}")
    assert response.status_code == 400 and "cursor" in problem(response)["errors"]
    tool = "update_ticket"
    w.propose(w.run["id"], "conflicted", tool=tool, target="T-1", desired_state={"s": "open"})
    for n in range(51):
        refused = w.propose(
            w.run["id"], "conflicted", tool=tool, target=f"T-{n + 2}", desired_state={}
        )
        assert refused.status_code == 422
    first = admin.get("/api/v1/idempotency-conflicts").json()
    assert len(first["results"]) == 50 and first["next"]
    second = admin.get(f"/api/v1/idempotency-conflicts?cursor={first['next']}")
    assert second.status_code == 200, second.content
    assert len(second.json()["results"]) == 1
    ids = {c["id"] for c in first["results"]} | {c["id"] for c in second.json()["results"]}
    assert len(ids) == 51
    # And a UUID list refuses an integer list's cursor.
    assert admin.get(f"/api/v1/audit?cursor={first['next']}").status_code == 400
    # The console shows its first page for either.
    for path in ("/conflicts/", "/notifications/deliveries/"):
        assert console(w.admin).get(f"{path}?after={foreign}").status_code == 200
    paged = console(w.admin).get(f"/conflicts/?after={first['next']}")
    assert paged.status_code == 200


@pytest.mark.parametrize("path", ["/api/v1/tools/%00", "/api/v1/tools/a%00b/declaration"])
def test_a_nul_in_a_tool_name_in_the_path_is_a_404(w, path):
    for client in (w.admin.client(), w.agent.client()):
        response = client.get(path) if "declaration" not in path else client.post(path, {})
        assert response.status_code == 404, response.content
        assert problem(response)["type"] == "/problems/not-found"


@pytest.mark.parametrize("field", ["config", "trigger", "session_id"])
def test_a_multipart_field_sent_as_a_file_part_is_a_400_naming_it(w, field):
    from django.core.files.uploadedfile import SimpleUploadedFile

    before = written(w)
    form = {"trigger": "api", "config": "{}"}
    form[field] = SimpleUploadedFile("x.json", b'{"a": 1}', content_type="application/json")
    response = w.agent.client().post("/api/v1/runs", form, format="multipart")
    assert_refused(w, before, response, field)


def test_metrics_with_a_non_ascii_bearer_is_a_401_not_a_500(w, settings):
    settings.METRICS_TOKEN = "scrape-me"
    for value in ("Bearer é", "Bearer \u2603", "Bearer scrape-mé"):
        response = Client().get("/metrics", HTTP_AUTHORIZATION=value)
        assert response.status_code == 401, (value, response.status_code)
        assert response["Content-Type"] == "application/problem+json"
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").status_code == 200
