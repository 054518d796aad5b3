from django.core.management.base import BaseCommand, CommandError

from core.audit import Actor
from core.errors import DomainError
from core.services import tenant_create

CLI = Actor("system", "manage.py")


class Command(BaseCommand):
    help = "Create a tenant."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, slug, name, **options):
        try:
            tenant = tenant_create(slug=slug, name=name, actor=CLI)
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(tenant.slug)
