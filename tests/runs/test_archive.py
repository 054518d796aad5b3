"""manage.py archive: what it writes equals what it deletes, nothing open (or needed by a
pending replay) is touched, the audit log records the archive, and the append-only rule
still holds for everyone else."""

import gzip
import hashlib
import io
import json
from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.db import DatabaseError, transaction
from django.utils import timezone

from core.audit import SYSTEM, AuditDeletionRefused, audit_events_delete_archived
from core.models import AuditEvent
from ledger.models import LedgerEntry
from runs.engine import dispatch
from runs.models import Action, Attempt, Reconciliation, Replay, Run
from tests.conftest import start_downstream

TABLES = {
    "runs": Run,
    "actions": Action,
    "attempts": Attempt,
    "reconciliations": Reconciliation,
    "ledger_entries": LedgerEntry,
    "replays": Replay,
}


def settle(world, run_id, key, target, tool="update_ticket"):
    response = world.propose(run_id, key, tool=tool, target=target, desired_state={"s": key})
    assert response.status_code == 201, response.content
    action = response.json()
    dispatch.action_dispatch(action["id"])  # or a worker already did
    assert world.wait_action(action["id"])["state"] == "succeeded"
    return action


def finish(world, run_id, status="success"):
    response = world.agent.client().post(
        f"/api/v1/runs/{run_id}/finish", {"status": status, "tools_called": None}, format="json"
    )
    assert response.status_code == 200, response.content


def snapshot(tenant) -> dict[str, set[str]]:
    """Every id of this tenant's rows, per table."""
    actions = Action.objects.filter(tenant=tenant)
    return {
        "runs": {str(i) for i in Run.objects.filter(tenant=tenant).values_list("pk", flat=True)},
        "actions": {str(i) for i in actions.values_list("pk", flat=True)},
        "attempts": {
            str(i)
            for i in Attempt.objects.filter(action__tenant=tenant).values_list("pk", flat=True)
        },
        "reconciliations": {
            str(i)
            for i in Reconciliation.objects.filter(action__tenant=tenant).values_list(
                "pk", flat=True
            )
        },
        "ledger_entries": {
            str(i) for i in LedgerEntry.objects.filter(tenant=tenant).values_list("pk", flat=True)
        },
        "replays": {
            str(i) for i in Replay.objects.filter(tenant=tenant).values_list("pk", flat=True)
        },
        "audit_events": {
            str(i) for i in AuditEvent.objects.filter(tenant=tenant).values_list("pk", flat=True)
        },
    }


def read_archive(folder) -> dict[str, list[dict]]:
    return {
        name: [json.loads(line) for line in gzip.open(folder / f"{name}.jsonl.gz", "rt")]
        for name in [*TABLES, "audit_events"]
    }


@pytest.fixture
def own_downstream():
    """A downstream of this test's own: the archive deletes the attempts of what it sent, so
    the shared one's tally would no longer match the database (the global invariants,
    tests/invariants.py)."""
    ds = start_downstream()
    yield ds
    ds.process.terminate()
    ds.process.wait(10)


def test_archive_writes_exactly_what_it_deletes_and_never_touches_open_work(
    world, own_downstream, tmp_path
):
    world.tool("update_ticket", base_url=own_downstream.base())
    world.tool("close_ticket", requires_approval=True, base_url=own_downstream.base())
    # A: settled long ago, with two applied effects: archived whole.
    a = world.start_run()
    settled = [settle(world, a["id"], f"ar-a{i}", f"ar-a{i}") for i in range(2)]
    finish(world, a["id"])
    # B: still running, with an action awaiting approval: open, untouched.
    b = world.start_run()
    waiting = world.propose(
        b["id"], "ar-b", tool="close_ticket", target="ar-b", desired_state={"s": 1}
    ).json()
    assert waiting["state"] == "awaiting_approval"
    # C: failed after a call, force-replayed; the replay is pending, so C stays for it.
    c = world.start_run()
    c_action = settle(world, c["id"], "ar-c", "ar-c")
    finish(world, c["id"], "error")
    replay = world.admin.client().post(
        f"/api/v1/runs/{c['id']}/replay", {"force": True, "reason": "test"}, format="json"
    )
    assert replay.status_code == 201, replay.content

    before = snapshot(world.tenant)
    with time_machine.travel(timezone.now() + timedelta(days=100)):
        out = io.StringIO()
        call_command(
            "archive",
            "--older-than",
            "90d",
            "--tenant",
            world.tenant.slug,
            "--out",
            str(tmp_path),
            stdout=out,
        )
    after = snapshot(world.tenant)
    [folder] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not folder.name.endswith(".partial")
    written = read_archive(folder)

    # What it wrote is exactly what disappeared, table by table.
    for name, rows in written.items():
        ids = {str(row["id"]) for row in rows}
        assert len(ids) == len(rows), name
        gone = before[name] - after[name]
        if name == "audit_events":
            assert ids == gone, name
        else:
            assert ids == gone, (name, ids ^ gone)

    # A went whole: the run, its actions, their attempts and ledger entries.
    assert {r["id"] for r in written["runs"]} == {a["id"]}
    assert {r["id"] for r in written["actions"]} == {x["id"] for x in settled}
    assert len(written["attempts"]) == 2 and len(written["ledger_entries"]) == 2
    # Nothing open, nothing a pending replay needs.
    assert Action.objects.filter(pk=waiting["id"], state="awaiting_approval").exists()
    assert Action.objects.filter(pk=c_action["id"]).exists()
    assert Run.objects.filter(pk=c["id"]).exists()
    assert Run.objects.filter(replay_of=c["id"], status="pending").exists()
    assert written["replays"] == []
    # The history of what stays, stays; the rest of the old history went.
    for kept in [waiting["id"], b["id"], c["id"], c_action["id"]]:
        assert AuditEvent.objects.filter(object_id=kept).exists(), kept
    assert any(e["verb"] == "tenant.create" for e in written["audit_events"])

    # The audit log keeps its own record of the archive, with the files' checksums.
    record = AuditEvent.objects.get(
        verb="audit.archive", object_id=folder.name, tenant=world.tenant
    )
    assert record.actor == {"kind": "system", "name": "archive"}
    assert record.after["counts"] == {name: len(rows) for name, rows in written.items()}
    for filename, digest in record.after["files"].items():
        assert hashlib.sha256((folder / filename).read_bytes()).hexdigest() == digest
    assert json.loads((folder / "manifest.json").read_text())["counts"] == record.after["counts"]
    assert "archived to" in out.getvalue()

    # A second pass finds nothing more of A's kind.
    with time_machine.travel(timezone.now() + timedelta(days=100)):
        out = io.StringIO()
        call_command(
            "archive", "--older-than", "90d", "--tenant", world.tenant.slug, "--dry-run", stdout=out
        )
    assert "0 runs, 0 actions" in out.getvalue()


def test_audit_events_stay_append_only_outside_the_archive(world):
    event = AuditEvent.objects.filter(tenant=world.tenant).first()
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(reason="rewritten")
    # The guarded path itself refuses to run outside a transaction, and never deletes an
    # archive record.
    with pytest.raises(AuditDeletionRefused):
        audit_events_delete_archived([event.pk], using="default", actor=SYSTEM, record={})
    assert AuditEvent.objects.filter(pk=event.pk).exists()
    with transaction.atomic():
        record = AuditEvent.objects.create(
            tenant=world.tenant,
            at=timezone.now(),
            actor_kind="system",
            actor_name="archive",
            verb="audit.archive",
            object_type="archive",
            object_id="x",
        )
    with pytest.raises(AuditDeletionRefused), transaction.atomic():
        audit_events_delete_archived([record.pk], using="default", actor=SYSTEM, record={})
    assert AuditEvent.objects.filter(pk=record.pk).exists()


def test_archive_refuses_a_window_too_short_and_a_bad_duration(live_db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="at least 1d"):
        call_command("archive", "--older-than", "2h", "--dry-run")
    with pytest.raises(CommandError, match="older-than"):
        call_command("archive", "--older-than", "ninety", "--dry-run")


@pytest.fixture
def second_alias(live_db):
    """A second connection alias to the same database, as a deployment could name for the
    owner role (ARCHIVE_DATABASE): the owner's settings under another name."""
    from django.db import connections

    connections.settings["archiver"] = {**connections["owner"].settings_dict}
    try:
        yield "archiver"
    finally:
        connections["archiver"].close()
        del connections["archiver"]
        del connections.settings["archiver"]


def test_archive_runs_on_the_connection_it_is_given(world, own_downstream, second_alias, tmp_path):
    world.tool("update_ticket", base_url=own_downstream.base())
    run = world.start_run()
    action = settle(world, run["id"], "alias-1", "alias-1")
    finish(world, run["id"])
    with time_machine.travel(timezone.now() + timedelta(days=100)):
        call_command(
            "archive",
            "--older-than",
            "90d",
            "--tenant",
            world.tenant.slug,
            "--database",
            second_alias,
            "--out",
            str(tmp_path),
            stdout=io.StringIO(),
        )
    assert not Action.objects.filter(pk=action["id"]).exists()
    assert not Run.objects.filter(pk=run["id"]).exists()
    assert not AuditEvent.objects.filter(object_id=action["id"]).exists()
    assert AuditEvent.objects.filter(verb="audit.archive", tenant=world.tenant).count() == 1
