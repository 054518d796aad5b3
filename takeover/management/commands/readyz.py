from django.core.management.base import BaseCommand, CommandError

from takeover.ops import failing, readiness


class Command(BaseCommand):
    help = (
        "The checks of GET /readyz (database, migrations, connection, broker) from the command "
        "line, for the health checks of processes that serve no HTTP (worker, beat). Exit 1 if "
        "any fails; a broker that does not answer is degraded, not a failure, as on /readyz."
    )

    def handle(self, **options):
        checks = readiness()
        for name, result in checks.items():
            self.stdout.write(f"{name}: {result}")
        if failing(checks):
            raise CommandError("not ready")
