from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from core.models import Tenant
from core.services import principal_create

from .create_tenant import CLI


class Command(BaseCommand):
    help = "Create an agent principal and print its API token (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("name")

    def handle(self, tenant, name, **options):
        try:
            _principal, token = principal_create(
                tenant=Tenant.objects.get(slug=tenant), name=name, actor=CLI
            )
        except Tenant.DoesNotExist as exc:
            raise CommandError(f"No tenant {tenant!r}.") from exc
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(token)
