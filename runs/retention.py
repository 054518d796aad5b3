"""Retention: archive what is settled and old to compressed JSONL, then delete exactly that.

What goes, in whole runs (a run's `tools_executed` and its replay verdict are computed from
its actions, so a run never loses some of its actions and keeps the rest):

- runs settled (`success`, `error`, `cancelled`) before the cutoff, whose every action is
  settled (`succeeded`, `failed`, `blocked`) and unchanged since the cutoff, and that no
  four-eyes force request still waits on; with their actions, attempts, reconciliations
  and ledger entries, the replay records and decided force requests between them, and the
  idempotency conflicts that name their actions. A run is kept while a replay of it, or the
  run it replays, is kept: nothing a pending replay could need ever goes, and no replay
  history is cut in half;
- audit events older than the cutoff, except earlier archive records (`audit.archive`),
  which stay for good, and the history of every run and action that stays (an open
  action's timeline in the console is read from its audit events).

`tenant` limits a pass to one tenant's runs and audit events (without it, events that
belong to no tenant are archived too).

Nothing open is touched: an `unknown`, `needs_human`, `queued`, `dispatching` or
`awaiting_approval` action keeps its run, and that run's replays, in place.

Known consequence, on purpose: an idempotency key whose ledger entry is archived is free
again. A runtime that replays a trigger older than the retention period gets a new action,
not a ledger hit: keep the retention period longer than any trigger can be redelivered.
Approvals and approval requests stay (they name actions by id only); a run's copied input
file stays on disk.

Where archives go: a Django storage (`storages["archive"]`, takeover/settings.py): a local
folder (`ARCHIVE_DIR`, files 0600 in folders 0700) or an S3-compatible bucket through
django-storages (`ARCHIVE_STORAGE=s3`).

How (one transaction on `using`, one archive at a time: a transaction-level advisory lock):
lock the chosen runs and actions, write every row to compressed JSONL files in a private
temporary folder, upload each to `<archive id>/` in the storage with a `manifest.json`
(counts and sha256 per file), **read every upload back and compare its sha256**, and only
then delete by the same ids, checking each count against what was written, and delete the
audit events through `core.audit.audit_events_delete_archived` (which records the archive,
with its manifest, in the audit log); commit. A failed or unverifiable upload deletes
nothing: the transaction rolls back and the uploaded files are removed (best effort). An
archive whose transaction did not commit can remain in storage if that removal failed too:
its rows are still in the database and go to a later archive; the audit log's
`audit.archive` events are the record of what was deleted.

`dry_run` counts what would go, with plain reads: no row lock, no advisory lock, nothing
written, so it can run beside the engine at any time.
"""

import gzip
import hashlib
import json
import logging
import secrets
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.core.files import File
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from core.audit import ARCHIVE_VERB, Actor, audit_events_delete_archived
from core.models import AuditEvent
from ledger.models import LedgerEntry

from .models import (
    Action,
    Attempt,
    ForceReplayRequest,
    IdempotencyConflict,
    Reconciliation,
    Replay,
    Run,
)
from .states import TERMINAL, ForceRequestState, RunStatus

SETTLED_RUNS = [RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.CANCELLED]


logger = logging.getLogger(__name__)

ARCHIVER = Actor("system", "archive")
# Passes per scheduled run at most; what is left goes at the next one.
SCHEDULED_PASSES = 10

# One archive at a time (two beats, or a person beside the schedule): the key of a
# transaction-level advisory lock.
ADVISORY_LOCK = "takeover.archive"
CHUNK = 1024 * 1024


class ArchiveMismatch(Exception):
    pass


class ArchiveUploadFailed(Exception):
    """An upload failed or read back different: nothing was deleted."""


class ArchiveBusy(Exception):
    """Another archive is running on this database."""


@dataclass
class ArchiveResult:
    archive_id: str
    cutoff: str
    location: str | None  # where the archive is, once it is complete (None: nothing to archive)
    counts: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # name → sha256
    more: bool = False  # the limit was reached: run it again


def _eligible_runs(cutoff, using: str, limit: int, tenant) -> list:
    open_or_recent = (
        Action.objects.using(using)
        .filter(run=OuterRef("pk"))
        .filter(~Q(state__in=TERMINAL) | Q(updated_at__gte=cutoff))
    )
    # A second admin may still confirm it: the run is not history yet.
    force_pending = ForceReplayRequest.objects.using(using).filter(
        run=OuterRef("pk"), state=ForceRequestState.PENDING
    )
    runs = Run.objects.using(using)
    if tenant is not None:
        runs = runs.filter(tenant=tenant)
    candidates = set(
        runs.filter(status__in=SETTLED_RUNS, created_at__lt=cutoff)
        .filter(Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True))
        .exclude(Exists(open_or_recent))
        .exclude(Exists(force_pending))
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
    # A run goes only with its whole replay family: drop, until nothing changes, every run
    # whose replay or original stays.
    while candidates:
        links = Run.objects.using(using).filter(
            Q(pk__in=candidates, replay_of__isnull=False) | Q(replay_of__in=candidates)
        )
        staying = set()
        for run_id, original in links.values_list("pk", "replay_of"):
            if (run_id in candidates) != (original in candidates):
                staying.add(run_id if run_id in candidates else original)
        if not staying:
            break
        candidates -= staying
    return sorted(candidates, key=str)


def _write(folder: Path, name: str, rows) -> tuple[int, str, list]:
    """rows → folder/name.jsonl.gz; (count, sha256 of the file, ids written)."""
    path = folder / f"{name}.jsonl.gz"
    ids = []
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, cls=DjangoJSONEncoder, sort_keys=True) + "\n")
            ids.append(row["id"])
    return len(ids), _sha256(path.open("rb")), ids


def _sha256(stream) -> str:
    digest = hashlib.sha256()
    with stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _upload(storage, folder: Path, archive_id: str, digests: dict[str, str], uploaded: list):
    """Upload every file of `folder` to `<archive_id>/` in `storage`, the manifest last, then
    read each back and compare its sha256 with what was written. Raises
    ArchiveUploadFailed; `uploaded` collects the names stored, for the clean-up."""
    for local in sorted(folder.iterdir(), key=lambda p: p.name == "manifest.json"):
        name = f"{archive_id}/{local.name}"
        try:
            with local.open("rb") as content:
                stored = storage.save(name, File(content, name=local.name))
        except Exception as exc:
            raise ArchiveUploadFailed(f"uploading {name}: {type(exc).__name__}: {exc}") from exc
        uploaded.append(stored)
        if stored != name:  # the storage renamed it: an archive of that name exists
            raise ArchiveUploadFailed(f"{name} exists already in the archive storage")
    for name, expected in digests.items():
        try:
            found = _sha256(storage.open(f"{archive_id}/{name}", "rb"))
        except Exception as exc:
            raise ArchiveUploadFailed(f"reading back {name}: {type(exc).__name__}: {exc}") from exc
        if found != expected:
            raise ArchiveUploadFailed(f"{name} reads back as {found}, not {expected}")


def _remove(storage, names) -> None:
    for name in names:
        try:
            storage.delete(name)
        except Exception:  # the archive failed anyway; what is left is named in the log
            logger.exception("archive: could not remove %s after a failed archive", name)


def _location(storage, archive_id: str) -> str:
    bucket = getattr(storage, "bucket_name", None)
    if bucket:
        prefix = getattr(storage, "location", "").strip("/")
        return f"s3://{bucket}/{prefix + '/' if prefix else ''}{archive_id}/"
    return storage.path(archive_id)


def _delete(model, ids, using: str) -> int:
    if not ids:
        return 0
    # Raw DELETE of exactly these ids: no cascade collector (the PROTECT foreign keys are
    # satisfied because every referencing row goes in this same transaction).
    return model.objects.using(using).filter(pk__in=ids)._raw_delete(using)


def _tables(cutoff, run_ids, using: str, limit: int, tenant, *, lock: bool) -> dict:
    """What goes with `run_ids`, table by table (querysets of values); the runs, actions
    and ledger entries locked FOR UPDATE when `lock`."""

    def locking(queryset):
        return queryset.select_for_update() if lock else queryset

    # Runs first, then their actions: the order the rest of the engine locks in.
    runs = locking(Run.objects.using(using).filter(pk__in=run_ids)).values()
    if lock:
        runs = list(runs)
    actions = locking(Action.objects.using(using).filter(run__in=run_ids))
    action_ids = list(actions.values_list("pk", flat=True))
    events = AuditEvent.objects.using(using).filter(at__lt=cutoff)
    kept_runs = Run.objects.using(using).filter(created_at__lt=cutoff)
    kept_actions = Action.objects.using(using).filter(created_at__lt=cutoff)
    if tenant is not None:
        events = events.filter(tenant=tenant)
        kept_runs = kept_runs.filter(tenant=tenant)
        kept_actions = kept_actions.filter(tenant=tenant)
    # The history of what stays, stays: runs and actions that began before the cutoff and are
    # not archived now (open ones, their runs, their replay families).
    kept_runs = [str(pk) for pk in kept_runs.exclude(pk__in=run_ids).values_list("pk", flat=True)]
    kept_actions = [
        str(pk) for pk in kept_actions.exclude(pk__in=action_ids).values_list("pk", flat=True)
    ]
    events = (
        events.exclude(verb=ARCHIVE_VERB)
        .exclude(object_type="run", object_id__in=kept_runs)
        .exclude(object_type="action", object_id__in=kept_actions)
    )
    return {
        "runs": runs,
        "actions": list(actions.values()) if lock else actions.values(),
        "attempts": Attempt.objects.using(using).filter(action__in=action_ids).values(),
        "reconciliations": Reconciliation.objects.using(using)
        .filter(action__in=action_ids)
        .values(),
        "ledger_entries": locking(
            LedgerEntry.objects.using(using).filter(
                pk__in=Action.objects.using(using)
                .filter(pk__in=action_ids)
                .values("ledger_entry_id")
            )
        ).values(),
        "replays": Replay.objects.using(using)
        .filter(Q(original_run__in=run_ids) | Q(new_run__in=run_ids))
        .values(),
        # Records that name what goes (a refused proposal's key holder, a decided four-eyes
        # request) go with it: a reference to a deleted row would fail the commit.
        "idempotency_conflicts": IdempotencyConflict.objects.using(using)
        .filter(existing_action__in=action_ids)
        .values(),
        "force_replay_requests": ForceReplayRequest.objects.using(using)
        .filter(Q(run__in=run_ids) | Q(new_run__in=run_ids))
        .values(),
        "audit_events": events.order_by("at").values()[:limit],
    }


def archive(
    older_than: timedelta,
    *,
    storage,
    actor: Actor,
    using: str = "default",
    limit: int = 10_000,
    dry_run: bool = False,
    tenant=None,
) -> ArchiveResult:
    now = timezone.now()
    cutoff = now - older_than
    archive_id = now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
    result = ArchiveResult(archive_id=archive_id, cutoff=cutoff.isoformat(), location=None)
    if dry_run:
        run_ids = _eligible_runs(cutoff, using, limit, tenant)
        tables = _tables(cutoff, run_ids, using, limit, tenant, lock=False)
        result.counts = {
            name: len(rows) if isinstance(rows, list) else rows.count()
            for name, rows in tables.items()
        }
        result.more = len(run_ids) >= limit or result.counts["audit_events"] >= limit
        return result
    uploaded: list[str] = []
    try:
        with transaction.atomic(using=using), tempfile.TemporaryDirectory() as scratch:
            with connections[using].cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [ADVISORY_LOCK])
                if not cursor.fetchone()[0]:
                    raise ArchiveBusy("another archive is running on this database")
            run_ids = _eligible_runs(cutoff, using, limit, tenant)
            # Lock what goes, so nothing changes between the write and the delete.
            tables = _tables(cutoff, run_ids, using, limit, tenant, lock=True)
            if any(a["state"] not in TERMINAL for a in tables["actions"]):
                raise ArchiveMismatch("an action changed state while being archived")
            folder = Path(scratch)
            written = {}
            for name, rows in tables.items():
                count, digest, ids = _write(folder, name, rows)
                result.counts[name], result.files[f"{name}.jsonl.gz"] = count, digest
                written[name] = ids
            result.more = len(run_ids) >= limit or result.counts["audit_events"] >= limit
            if not any(result.counts.values()):
                return result  # nothing is old enough: no empty archive, no audit record
            manifest = {
                "archive_id": archive_id,
                "tenant": tenant.slug if tenant is not None else None,
                "cutoff": result.cutoff,
                "created_at": now.isoformat(),
                "counts": result.counts,
                "files": result.files,
                "location": _location(storage, archive_id),
                "reason": f"retention: settled records and audit events older than {older_than}",
            }
            (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            _upload(storage, folder, archive_id, result.files, uploaded)

            # Verified in storage: now, and only now, delete. Children first; each count
            # must equal what was written.
            order = [
                ("idempotency_conflicts", IdempotencyConflict),
                ("force_replay_requests", ForceReplayRequest),
                ("replays", Replay),
                ("attempts", Attempt),
                ("reconciliations", Reconciliation),
                ("actions", Action),
                ("ledger_entries", LedgerEntry),
                ("runs", Run),
            ]
            for name, model in order:
                deleted = _delete(model, written[name], using)
                if deleted != len(written[name]):
                    raise ArchiveMismatch(
                        f"{name}: deleted {deleted}, wrote {len(written[name])}; rolled back"
                    )
            audit_events_delete_archived(
                written["audit_events"], using=using, actor=actor, record=manifest, tenant=tenant
            )
    except BaseException:
        _remove(storage, uploaded)
        raise
    result.location = manifest["location"]
    return result


def archive_scheduled() -> list[ArchiveResult]:
    """What beat's `ARCHIVE_EVERY` runs (runs.tasks.archive): archive everything older than
    `ARCHIVE_OLDER_THAN` to the archive storage, pass after pass while a pass reached the
    limit (at most SCHEDULED_PASSES: the rest goes next time)."""
    from django.conf import settings
    from django.core.files.storage import storages

    from core.durations import parse_duration

    results = []
    for _ in range(SCHEDULED_PASSES):
        result = archive(
            parse_duration(settings.ARCHIVE_OLDER_THAN),
            storage=storages["archive"],
            actor=ARCHIVER,
            using=settings.ARCHIVE_DATABASE,
        )
        results.append(result)
        if result.location is None:
            logger.info("archive: nothing older than %s", settings.ARCHIVE_OLDER_THAN)
            break
        logger.info(
            "archived to %s: %s",
            result.location,
            ", ".join(f"{n} {name}" for name, n in result.counts.items()),
        )
        if not result.more:
            break
    return results
