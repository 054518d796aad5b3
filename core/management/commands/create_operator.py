from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from core.models import Role, Tenant
from core.services import operator_create

from .create_tenant import CLI


class Command(BaseCommand):
    help = "Give a user a role in a tenant (creating the user) and print a new API token."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument("--password", help="set a password for the console sign-in")
        parser.add_argument("username")

    def handle(self, tenant, role, password, username, **options):
        try:
            _user, token = operator_create(
                tenant=Tenant.objects.get(slug=tenant),
                username=username,
                role=role,
                password=password,
                actor=CLI,
            )
        except Tenant.DoesNotExist as exc:
            raise CommandError(f"No tenant {tenant!r}.") from exc
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(token)
