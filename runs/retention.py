"""Retention: archive what is settled and old to compressed JSONL, then delete exactly that.

What goes, in whole runs (a run's `tools_executed` and its replay verdict are computed from
its actions, so a run never loses some of its actions and keeps the rest):

- runs settled (`success`, `error`, `cancelled`) before the cutoff, whose every action is
  settled (`succeeded`, `failed`, `blocked`) and unchanged since the cutoff; with their
  actions, attempts, reconciliations and ledger entries, and the replay records between
  them. A run is kept while a replay of it, or the run it replays, is kept: nothing a
  pending replay could need ever goes, and no replay history is cut in half;
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

How (one transaction on `using`): lock the chosen runs and actions, write every row to
`<out>/<archive id>.partial/*.jsonl.gz`, delete by the same ids and check each count
against what was written (any difference rolls everything back and removes the files),
delete the audit events through `core.audit.audit_events_delete_archived` (which records
the archive in the audit log), commit, and only then rename the folder to `<archive id>/`.
"""

import gzip
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from core.audit import ARCHIVE_VERB, Actor, audit_events_delete_archived
from core.models import AuditEvent
from ledger.models import LedgerEntry

from .models import Action, Attempt, Reconciliation, Replay, Run
from .states import TERMINAL, RunStatus

SETTLED_RUNS = [RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.CANCELLED]


class ArchiveMismatch(Exception):
    pass


@dataclass
class ArchiveResult:
    archive_id: str
    cutoff: str
    path: Path | None
    counts: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # name → sha256
    more: bool = False  # the limit was reached: run it again


def _eligible_runs(cutoff, using: str, limit: int, tenant) -> list:
    open_or_recent = (
        Action.objects.using(using)
        .filter(run=OuterRef("pk"))
        .filter(~Q(state__in=TERMINAL) | Q(updated_at__gte=cutoff))
    )
    runs = Run.objects.using(using)
    if tenant is not None:
        runs = runs.filter(tenant=tenant)
    candidates = set(
        runs.filter(status__in=SETTLED_RUNS, created_at__lt=cutoff)
        .filter(Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True))
        .exclude(Exists(open_or_recent))
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
    return len(ids), hashlib.sha256(path.read_bytes()).hexdigest(), ids


def _delete(model, ids, using: str) -> int:
    if not ids:
        return 0
    # Raw DELETE of exactly these ids: no cascade collector (the PROTECT foreign keys are
    # satisfied because every referencing row goes in this same transaction).
    return model.objects.using(using).filter(pk__in=ids)._raw_delete(using)


def archive(
    older_than: timedelta,
    *,
    out_dir: Path,
    actor: Actor,
    using: str = "default",
    limit: int = 10_000,
    dry_run: bool = False,
    tenant=None,
) -> ArchiveResult:
    now = timezone.now()
    cutoff = now - older_than
    archive_id = now.strftime("%Y%m%dT%H%M%SZ")
    result = ArchiveResult(archive_id=archive_id, cutoff=cutoff.isoformat(), path=None)
    folder = Path(out_dir) / f"{archive_id}.partial"
    if not dry_run:
        folder.mkdir(parents=True, exist_ok=False)
    try:
        with transaction.atomic(using=using):
            run_ids = _eligible_runs(cutoff, using, limit, tenant)
            # Lock what goes, so nothing changes between the write and the delete.
            runs = list(
                Run.objects.using(using).select_for_update().filter(pk__in=run_ids).values()
            )
            actions = list(
                Action.objects.using(using).select_for_update().filter(run__in=run_ids).values()
            )
            action_ids = [a["id"] for a in actions]
            if any(a["state"] not in TERMINAL for a in actions):
                raise ArchiveMismatch("an action changed state while being archived")
            ledger_ids = [a["ledger_entry_id"] for a in actions]
            events = AuditEvent.objects.using(using).filter(at__lt=cutoff)
            if tenant is not None:
                events = events.filter(tenant=tenant)
            # The history of what stays, stays: runs and actions that began before the cutoff
            # and are not archived now (open ones, their runs, their replay families).
            kept_runs = Run.objects.using(using).filter(created_at__lt=cutoff)
            kept_actions = Action.objects.using(using).filter(created_at__lt=cutoff)
            if tenant is not None:
                kept_runs, kept_actions = (
                    kept_runs.filter(tenant=tenant),
                    kept_actions.filter(tenant=tenant),
                )
            kept_runs = [
                str(pk) for pk in kept_runs.exclude(pk__in=run_ids).values_list("pk", flat=True)
            ]
            kept_actions = [
                str(pk)
                for pk in kept_actions.exclude(pk__in=action_ids).values_list("pk", flat=True)
            ]
            events = (
                events.exclude(verb=ARCHIVE_VERB)
                .exclude(object_type="run", object_id__in=kept_runs)
                .exclude(object_type="action", object_id__in=kept_actions)
            )
            tables = {
                "runs": runs,
                "actions": actions,
                "attempts": Attempt.objects.using(using).filter(action__in=action_ids).values(),
                "reconciliations": Reconciliation.objects.using(using)
                .filter(action__in=action_ids)
                .values(),
                "ledger_entries": LedgerEntry.objects.using(using)
                .select_for_update()
                .filter(pk__in=ledger_ids)
                .values(),
                "replays": Replay.objects.using(using)
                .filter(Q(original_run__in=run_ids) | Q(new_run__in=run_ids))
                .values(),
                "audit_events": events.order_by("at").values()[:limit],
            }
            if dry_run:
                result.counts = {name: len(list(rows)) for name, rows in tables.items()}
                result.more = len(run_ids) >= limit or result.counts["audit_events"] >= limit
                transaction.set_rollback(True, using=using)
                return result
            written = {}
            for name, rows in tables.items():
                count, digest, ids = _write(folder, name, rows)
                result.counts[name], result.files[f"{name}.jsonl.gz"] = count, digest
                written[name] = ids
            result.more = len(run_ids) >= limit or result.counts["audit_events"] >= limit

            # Children first; each count must equal what was written.
            order = [
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
            manifest = {
                "archive_id": archive_id,
                "tenant": tenant.slug if tenant is not None else None,
                "cutoff": result.cutoff,
                "created_at": now.isoformat(),
                "counts": result.counts,
                "files": result.files,
                "reason": f"retention: settled records and audit events older than {older_than}",
            }
            (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            audit_events_delete_archived(
                written["audit_events"], using=using, actor=actor, record=manifest, tenant=tenant
            )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    # The final folder appears only once the deletion is committed.
    final = folder.with_name(archive_id)
    folder.rename(final)
    result.path = final
    return result
