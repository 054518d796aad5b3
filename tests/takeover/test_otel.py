"""OpenTelemetry (optional: skipped, with the reason, without the `[otel]` extra): one
trace from the proposing request to the worker's dispatch and the tool call."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry.sdk") is None,
    reason="the [otel] extra is not installed (pip install '.[otel]')",
)


def test_one_trace_from_the_request_to_the_tool_call(live_db, downstream):
    from tests.conftest import database_url

    result = subprocess.run(
        [sys.executable, "-m", "tests.takeover.otel_flow", downstream.url],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    rid = seen["request_id"]
    spans = {(s["name"], s["kind"]): s["trace_id"] for s in seen["spans"]}
    # The web request's span: its trace id is the request id.
    assert any(kind == "SERVER" and trace == rid for (_n, kind), trace in spans.items()), spans
    # The dispatch, and the tool call under it, in the same trace.
    assert spans[("takeover.dispatch", "INTERNAL")] == rid
    assert any(kind == "CLIENT" and n == "POST" and t == rid for (n, kind), t in spans.items())
    # And the tool was told so.
    assert seen["traceparent"].split("-")[1] == rid
