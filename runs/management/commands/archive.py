from django.conf import settings
from django.core.files.storage import FileSystemStorage, storages
from django.core.management.base import BaseCommand, CommandError

from core.durations import parse_duration
from core.models import Tenant
from runs.retention import ARCHIVER, ArchiveBusy, ArchiveUploadFailed, archive


class Command(BaseCommand):
    help = (
        "Archive settled runs (with their actions, attempts, reconciliations, ledger entries "
        "and replay records) and audit events older than --older-than to compressed JSONL "
        "files in the archive storage (ARCHIVE_DIR, or an S3-compatible bucket), verify the "
        "upload, then delete exactly what was written, in one transaction. See "
        "runs/retention.py."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", required=True, help="e.g. 90d, 12w, 36h")
        parser.add_argument(
            "--out",
            default=None,
            help="a local folder for the archives (default: the archive storage, ARCHIVE_*)",
        )
        parser.add_argument(
            "--database",
            default=settings.ARCHIVE_DATABASE,
            help="the connection alias that may delete audit events (default: $ARCHIVE_DATABASE)",
        )
        parser.add_argument("--tenant", help="one tenant's runs and audit events only")
        parser.add_argument("--limit", type=int, default=10_000, help="runs and events per pass")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="count (without locking), write and delete nothing",
        )

    def handle(self, older_than, out, database, limit, dry_run, tenant, **options):
        try:
            age = parse_duration(older_than)
        except ValueError as exc:
            raise CommandError(f"--older-than: {exc}") from exc
        if age.total_seconds() < 86400:
            raise CommandError("--older-than: at least 1d; the recent past is still being worked")
        if database not in settings.DATABASES:
            raise CommandError(f"--database: no connection named {database!r}")
        if tenant is not None:
            try:
                tenant = Tenant.objects.using(database).get(slug=tenant)
            except Tenant.DoesNotExist as exc:
                raise CommandError(f"--tenant: no tenant {tenant!r}") from exc
        if out:
            storage = FileSystemStorage(
                location=out, file_permissions_mode=0o600, directory_permissions_mode=0o700
            )
        else:
            storage = storages["archive"]
        try:
            result = archive(
                age,
                storage=storage,
                actor=ARCHIVER,
                using=database,
                limit=limit,
                dry_run=dry_run,
                tenant=tenant,
            )
        except ArchiveUploadFailed as exc:
            raise CommandError(f"the archive was not stored, nothing was deleted: {exc}") from exc
        except ArchiveBusy as exc:
            raise CommandError(str(exc)) from exc
        counts = ", ".join(f"{n} {name}" for name, n in result.counts.items())
        if dry_run:
            self.stdout.write(f"would archive (cutoff {result.cutoff}): {counts}")
        elif result.location is None:
            self.stdout.write(f"nothing to archive (cutoff {result.cutoff})")
        else:
            self.stdout.write(f"archived to {result.location} (cutoff {result.cutoff}): {counts}")
        if result.more:
            self.stdout.write("the limit was reached: run it again for the rest")
