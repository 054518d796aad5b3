"""Where the request id comes from (the worker side: test_worker_observability.py); and that
every process writes JSON lines under LOG_FORMAT=json, plain text otherwise."""

import json
import os
import subprocess
import sys
import time
from datetime import datetime

import httpx
import pytest

from tests.conftest import ROOT, database_url


def test_a_callers_traceparent_carries_on_as_the_request_id(world):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = world.agent.client().get(
        "/api/v1/me", HTTP_TRACEPARENT=f"00-{trace_id}-00f067aa0ba902b7-01"
    )
    assert response["X-Request-ID"] == trace_id
    # Malformed or all-zero: a fresh id instead.
    for bad in ["00-zz-00f067aa0ba902b7-01", f"00-{'0' * 32}-00f067aa0ba902b7-01"]:
        other = world.agent.client().get("/api/v1/me", HTTP_TRACEPARENT=bad)
        assert len(other["X-Request-ID"]) == 32 and other["X-Request-ID"] != trace_id


# --- every line JSON under LOG_FORMAT=json ---------------------------------------------------


def json_lines(text: str) -> list[dict]:
    """Every line parsed as JSON, each with a zone-aware RFC 3339 `time`; fails naming the
    first line that is not."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"line {number} is not JSON: {line!r}") from None
        stamp = datetime.fromisoformat(record["time"])
        assert stamp.tzinfo is not None and stamp.utcoffset() is not None, line
        assert "T" in record["time"], line
        records.append(record)
    return records


def celery_beat(tmp_path, env, until="runs.sweep") -> str:
    """A real `celery beat`, stopped with SIGTERM once it has sent `until`; its output."""
    log = tmp_path / f"beat-{len(env)}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "takeover", "beat"),
                *("--loglevel", "INFO", "-s", str(tmp_path / f"schedule-{len(env)}")),
            ],
            cwd=ROOT,
            env={
                **{k: v for k, v in os.environ.items() if k != "LOG_FORMAT"},
                "DATABASE_URL": database_url(),
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "CELERY_BROKER_DIR": str(tmp_path / "broker"),
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while f"({until})" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    process.terminate()
    process.wait(20)
    return log.read_text()


@pytest.mark.slow
@pytest.mark.worker
def test_every_line_of_web_worker_and_beat_is_json_with_a_zoned_time(world, web, worker, tmp_path):
    # The web: gunicorn's own lines (start, workers booting), its access log and Django's.
    world.tool("update_ticket")
    agent = {"Authorization": f"Bearer {world.agent.token}"}
    assert httpx.get(f"{web.url}/api/v1/me", headers=agent, timeout=60).status_code == 200
    assert httpx.get(f"{web.url}/api/v1/nope", headers=agent, timeout=60).status_code == 404
    time.sleep(0.5)  # the access line is written after the answer
    loggers = {r["logger"] for r in json_lines(web.log())}
    assert {"gunicorn.error", "gunicorn.access", "takeover.access"} <= loggers

    # The worker (with its embedded beat): Celery's banner, its loggers, ours.
    records = json_lines(worker.log())
    assert any("[config]" in r["message"] for r in records)  # the banner, as one record
    assert {"celery.apps.worker", "celery.beat"} <= {r["logger"] for r in records}

    # Beat on its own, which prints its banner before it sets up logging.
    beat = json_lines(celery_beat(tmp_path, {"LOG_FORMAT": "json"}))
    assert any("is starting" in r["message"] for r in beat)
    assert any("Sending due task runs.sweep" in r["message"] for r in beat)


@pytest.mark.slow
def test_plain_text_stays_the_default(live_db, tmp_path):
    output = celery_beat(tmp_path, {})
    assert "celery beat v" in output.splitlines()[0]
    with pytest.raises(ValueError):
        json.loads(output.splitlines()[0])
