"""Where archives go and when: an S3-compatible bucket (a real S3 server, moto's, over HTTP)
with every upload read back before anything is deleted, a failed upload that deletes
nothing, private local files, a dry run that takes no lock, and the schedule on beat."""

import gzip
import hashlib
import io
import json
import stat
import time
from datetime import timedelta

import boto3
import psycopg
import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.utils import timezone

from bench.management.commands.bench_queue import database_url as url_for
from core.models import AuditEvent
from runs.engine import dispatch
from runs.models import Action, IdempotencyConflict, Run
from tests.conftest import free_port, start_downstream
from tests.takeover.test_logs import celery_beat

BUCKET = "takeover-archives"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "archive-test", "AWS_SECRET_ACCESS_KEY": "archive-secret"}


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on a free port: real HTTP, real S3 API, in this process."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client
    server.stop()


def s3_storage(settings, endpoint, bucket=BUCKET):
    """The archive storage as ARCHIVE_STORAGE=s3 configures it (takeover/settings.py)."""
    settings.STORAGES = {
        **settings.STORAGES,
        "archive": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": bucket,
                "location": "takeover",
                "endpoint_url": endpoint,
                "region_name": "us-east-1",
                "file_overwrite": False,
                "querystring_auth": False,
                "access_key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secret_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            },
        },
    }


@pytest.fixture
def settled_run(world):
    """A run that succeeded with one applied effect, at a downstream of its own (the archive
    deletes its attempts: the shared downstream's tally would no longer match)."""
    downstream = start_downstream()
    try:
        world.tool("update_ticket", base_url=downstream.base())
        run = world.start_run()
        action = world.propose(
            run["id"], "arch-1", tool="update_ticket", target="arch-1", desired_state={"s": 1}
        ).json()
        dispatch.action_dispatch(action["id"])
        assert world.wait_action(action["id"])["state"] == "succeeded"
        finished = world.agent.client().post(
            f"/api/v1/runs/{run['id']}/finish",
            {"status": "success", "tools_called": None},
            format="json",
        )
        assert finished.status_code == 200, finished.content
        yield run, action
    finally:
        downstream.process.terminate()
        downstream.process.wait(10)


def later():
    return time_machine.travel(timezone.now() + timedelta(days=100))


def test_an_archive_round_trip_to_an_s3_compatible_server(world, settled_run, s3, settings):
    endpoint, client = s3
    run, action = settled_run
    s3_storage(settings, endpoint)
    out = io.StringIO()
    with later():
        call_command("archive", "--older-than", "90d", "--tenant", world.tenant.slug, stdout=out)
    assert f"archived to s3://{BUCKET}/takeover/" in out.getvalue()

    # The rows are gone, and the audit log records where they went.
    assert not Run.objects.filter(pk=run["id"]).exists()
    assert not Action.objects.filter(pk=action["id"]).exists()
    record = AuditEvent.objects.get(verb="audit.archive", tenant=world.tenant)
    location = record.after["location"]
    assert location == f"s3://{BUCKET}/takeover/{record.object_id}/"

    # The files are in the bucket, byte for byte what the manifest says.
    prefix = f"takeover/{record.object_id}/"
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
    names = {item["Key"].removeprefix(prefix) for item in listed}
    assert names == {*record.after["files"], "manifest.json"}
    for name, digest in record.after["files"].items():
        body = client.get_object(Bucket=BUCKET, Key=prefix + name)["Body"].read()
        assert hashlib.sha256(body).hexdigest() == digest
    manifest = json.loads(
        client.get_object(Bucket=BUCKET, Key=prefix + "manifest.json")["Body"].read()
    )
    assert manifest["counts"] == record.after["counts"]
    runs = gzip.decompress(
        client.get_object(Bucket=BUCKET, Key=prefix + "runs.jsonl.gz")["Body"].read()
    )
    assert [json.loads(line)["id"] for line in runs.decode().splitlines()] == [run["id"]]


def test_a_failed_upload_deletes_nothing(world, settled_run, s3, settings):
    endpoint, _client = s3
    run, action = settled_run
    s3_storage(settings, endpoint, bucket="no-such-bucket")
    before = AuditEvent.objects.filter(tenant=world.tenant).count()
    with later(), pytest.raises(CommandError, match="nothing was deleted"):
        call_command(
            "archive", "--older-than", "90d", "--tenant", world.tenant.slug, stdout=io.StringIO()
        )
    assert Run.objects.filter(pk=run["id"]).exists()
    assert Action.objects.filter(pk=action["id"]).exists()
    assert AuditEvent.objects.filter(tenant=world.tenant).count() == before
    assert not AuditEvent.objects.filter(verb="audit.archive", tenant=world.tenant).exists()


def test_local_archives_are_private_and_take_the_records_that_name_what_goes(
    world, settled_run, tmp_path
):
    _run, action = settled_run
    # The same key for another intent: refused, and recorded beside the action holding it.
    again = world.start_run()
    refused = world.propose(
        again["id"], "arch-1", tool="update_ticket", target="elsewhere", desired_state={"s": 2}
    )
    assert refused.status_code == 422
    conflict = IdempotencyConflict.objects.get(existing_action=action["id"])
    out = tmp_path / "archives"
    with later():
        call_command(
            "archive",
            *("--older-than", "90d", "--tenant", world.tenant.slug, "--out", str(out)),
            stdout=io.StringIO(),
        )
    [folder] = list(out.iterdir())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = list(folder.iterdir())
    assert {f.name for f in files} >= {"runs.jsonl.gz", "manifest.json"}
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    # The conflict went with the action it names (a reference to a deleted row would have
    # failed the commit and archived nothing).
    assert not Action.objects.filter(pk=action["id"]).exists()
    assert not IdempotencyConflict.objects.filter(pk=conflict.pk).exists()
    with gzip.open(folder / "idempotency_conflicts.jsonl.gz", "rt") as archived:
        assert [json.loads(line)["id"] for line in archived] == [conflict.pk]


def test_a_dry_run_counts_without_taking_a_lock(world, settled_run):
    run, _action = settled_run
    # Someone holds the run's row lock (the engine, another archive): a dry run that locked
    # would wait for it, then fail on lock_timeout.
    owner = connections["owner"].settings_dict
    with psycopg.connect(url_for(owner, owner["NAME"])) as holder:
        holder.execute("SELECT 1 FROM runs_run WHERE id = %s FOR UPDATE", [run["id"]])
        out = io.StringIO()
        started = time.monotonic()
        with later():
            call_command(
                "archive",
                *("--older-than", "90d", "--tenant", world.tenant.slug, "--dry-run"),
                stdout=out,
            )
        assert time.monotonic() - started < 5
        holder.rollback()
    assert "would archive" in out.getvalue() and "1 runs, 1 actions" in out.getvalue()
    assert Run.objects.filter(pk=run["id"]).exists()


@pytest.mark.slow
def test_beat_sends_the_archive_every_archive_every(live_db, tmp_path):
    output = celery_beat(tmp_path, {"ARCHIVE_EVERY": "1s"}, until="runs.archive")
    assert "Sending due task" in output and "(runs.archive)" in output
