"""The 40/60 campaign (docs/design.md, "Runs and replay"): a run dies after 40 of 100
e-mails; a forced replay with the same stable keys sends exactly the other 60, and nobody
gets two."""

import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.utils import timezone

from runs.models import Action
from runs.runtime import runs_reap_stale

from ..builders import SETUP

pytestmark = pytest.mark.worker

RUNTIME = Path(__file__).with_name("campaign_runtime.py")


def runtime(live_server, token, *args):
    return subprocess.Popen(
        [sys.executable, str(RUNTIME), live_server.url, token, *args],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_force_replayed_campaign_sends_only_what_was_not_sent(world, worker, live_server):
    world.tool("send_email", prefix="email", identity_fields=["campaign"], timeout_seconds=5)
    event = f"campaign-{uuid.uuid4().hex[:8]}"
    run = world.start_run(trigger="schedule", config={"campaign": event, "recipients": 100})

    first = runtime(
        live_server,
        world.agent.token,
        "--run",
        run["id"],
        "--event",
        event,
        "--recipients",
        "100",
        "--hang-after",
        "40",
    )
    lines = [first.stdout.readline() for _ in range(41)]  # "run …" + 40 × "sent …"
    assert all(line.startswith("sent") and line.split()[5] == "succeeded" for line in lines[1:])
    first.kill()  # SIGKILL: no finish, no goodbye
    first.wait(10)

    with time_machine.travel(timezone.now() + timedelta(hours=6, minutes=1)):
        runs_reap_stale(actor=SETUP)
    dead = world.agent.client().get(f"/api/v1/runs/{run['id']}").json()
    assert dead["status"] == "error"
    assert dead["tools_executed"] == ["send_email"]

    refused = world.admin.client().post(f"/api/v1/runs/{run['id']}/replay", {}, format="json")
    assert refused.status_code == 409
    forced = world.admin.client().post(
        f"/api/v1/runs/{run['id']}/replay",
        {"force": True, "reason": "the campaign host died; the ledger guards each send"},
        format="json",
    )
    assert forced.status_code == 201

    second = runtime(
        live_server, world.agent.token, "--claim", "--event", event, "--recipients", "100"
    )
    out, _ = second.communicate(timeout=300)
    assert second.returncode == 0, out
    sent = [line.split() for line in out.splitlines() if line.startswith("sent")]
    assert len(sent) == 100
    assert all(state == "succeeded" for *_, state in sent)
    replayed = [s for s in sent if s[3] == "True"]
    assert {int(s[1]) for s in replayed} == set(range(40))
    # Every subject and body was regenerated, so each of the 40 hits says content_changed.
    assert all(s[4] == "True" for s in replayed)
    assert all(s[3] == "False" for s in sent if int(s[1]) >= 40)

    recipients = [f"customer-{i:03d}.{event}@example.com" for i in range(100)]
    keys = [f"{event}:send_email:{r}" for r in recipients]
    new_run = forced.json()["id"]
    assert Action.objects.filter(run_id=new_run).count() == 60
    assert Action.objects.filter(run_id=run["id"]).count() == 40
    stats = world.downstream.stats()
    assert all(stats["effects_received"].get(k) == 1 for k in keys)
    outbox = stats["mutations"]["email"]
    assert all(outbox[r] == 1 for r in recipients)
