from django.core.management.base import BaseCommand, CommandError

from takeover.ops import readiness


class Command(BaseCommand):
    help = (
        "The checks of GET /readyz (database, migrations, broker) from the command line, for "
        "the health checks of processes that serve no HTTP (worker, beat). Exit 1 if any fails."
    )

    def handle(self, **options):
        checks = readiness()
        for name, result in checks.items():
            self.stdout.write(f"{name}: {result}")
        if any(result != "ok" for result in checks.values()):
            raise CommandError("not ready")
