"""What the cyclic garbage collector has to do in a web process.

A request that leaves objects in reference cycles hands them to the collector, whose pauses
stop every request of the process while it runs. Under `make bench`'s load they came every
few seconds, 12 to 28 ms of CPU each, and a full collection took about 75 ms, because the
URL conf and every view module, imported at the first request, were left out of the
worker's `gc.freeze()` (takeover/gunicorn_conf.py). So: an agent's requests leave no
cycle, and importing the WSGI application loads the URL conf."""

import gc
import json
import subprocess
import sys

from django.core.handlers.wsgi import WSGIHandler
from django.db.models import Model
from django.db.models.base import ModelState
from django.http import HttpRequest, HttpResponseBase
from django.test import RequestFactory

from ledger.models import LedgerEntry
from runs.models import Action

from ..conftest import ROOT, database_url

OURS = (Model, ModelState, HttpRequest, HttpResponseBase)


def _left_for_the_collector(work) -> list:
    """The objects of a model, a request or a response that `work()` left in reference
    cycles: unreachable, and freed by nothing but the collector."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds goes to gc.garbage, unfreed
    try:
        work()
        gc.collect()
        return [o for o in gc.garbage if isinstance(o, OURS)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


class Served:
    """The WSGI application as gunicorn calls it: an environ in, the body iterated and the
    response closed (which ends the request: Django's request_finished)."""

    def __init__(self, token: str):
        self.application, self.token = WSGIHandler(), token

    def __call__(self, method, path, body=None, **headers) -> tuple[int, dict]:
        factory = RequestFactory()
        environ = getattr(factory, method.lower())(
            path,
            data=json.dumps(body) if body is not None else None,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.token}",
            **headers,
        ).environ
        status = []
        response = self.application(environ, lambda s, _headers, _exc=None: status.append(s))
        try:
            content = b"".join(response)
        finally:
            response.close()
        return int(status[0].split()[0]), json.loads(content)


def test_an_agents_requests_leave_no_cycle(world):
    world.tool("update_ticket")
    call = Served(world.agent.token)
    _, run = call("POST", "/api/v1/runs", {"trigger": "api"})
    body = {"tool": "update_ticket", "target": "t", "desired_state": {"status": "done"}}
    answers = {}

    def propose(key, wait=""):
        path = f"/api/v1/runs/{run['id']}/actions" + (f"?wait={wait}" if wait else "")
        return call("POST", path, body, HTTP_IDEMPOTENCY_KEY=key)

    for name, work in {
        # Straight to the queue, answered at once.
        "queued": lambda: answers.update(queued=propose("k-queued")),
        # Claimed by the request and dispatched in it: an attempt, the tool called, settled.
        "dispatched here": lambda: answers.update(claimed=propose("k-claimed", wait=30)),
        "a ledger hit": lambda: answers.update(hit=propose("k-claimed")),
        "read": lambda: answers.update(
            read=call("GET", f"/api/v1/actions/{answers['claimed'][1]['id']}?wait=1")
        ),
    }.items():
        left = _left_for_the_collector(work)
        assert left == [], f"{name}: {sorted({type(o).__name__ for o in left})}"
    assert answers["queued"][0] == 201 and answers["queued"][1]["state"] == "queued"
    assert answers["claimed"][0] == 201 and answers["claimed"][1]["state"] == "succeeded"
    assert answers["hit"][0] == 200 and answers["hit"][1]["replayed"] is True
    assert answers["read"][0] == 200 and answers["read"][1]["state"] == "succeeded"


def test_the_check_sees_a_cycle():
    """Django's one-to-one descriptor caches each side on the other: the cycle a proposal
    made while its action held its ledger entry."""

    def made():
        entry = LedgerEntry(key="k", fingerprint="f")
        Action(ledger_entry=entry)

    assert {type(o) for o in _left_for_the_collector(made)} >= {Action, LedgerEntry, ModelState}


def test_importing_the_wsgi_application_loads_the_url_conf(live_db):
    """gunicorn's worker imports the application, then freezes what is loaded; the views
    must be loaded by then."""
    code = (
        "import sys; import takeover.wsgi; "
        "print(all(m in sys.modules for m in ('api.views.action', 'console.views')))"
    )
    env = {"DATABASE_URL": database_url(), "SECRET_KEY": "x" * 50, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]
