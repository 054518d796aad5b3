import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from console.models import BreakGlass
from core.audit import Verb, audit
from core.errors import DomainError
from core.management.commands.create_tenant import CLI
from core.models import Membership, Role, Tenant
from core.services import operator_create


class Command(BaseCommand):
    help = (
        "The break-glass admin: an admin of a tenant who may sign in to the console with a "
        "password while single sign-on is on (for the day the identity provider is down). "
        "Prints the password (generated unless --password is given). --end takes the "
        "permission away again. Audited in the tenant."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--password", help="default: a new random one, printed")
        parser.add_argument("--end", action="store_true", help="no password sign-in any more")
        parser.add_argument("username")

    def handle(self, tenant, password, end, username, **options):
        try:
            tenant = Tenant.objects.get(slug=tenant)
        except Tenant.DoesNotExist as exc:
            raise CommandError(f"No tenant {tenant!r}.") from exc
        if end:
            return self.end(tenant, username)
        password = password or secrets.token_urlsafe(18)
        try:
            with transaction.atomic():
                user, _token = operator_create(
                    tenant=tenant, username=username, role=Role.ADMIN, password=password, actor=CLI
                )
                BreakGlass.objects.get_or_create(user=user)
                audited(user, tenant, password_sign_in=True)
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(password)

    def end(self, tenant, username):
        user = get_user_model().objects.filter(username=username).first()
        if user is None or not Membership.objects.filter(user=user, tenant=tenant).exists():
            raise CommandError(f"No operator {username!r} in {tenant.slug}.")
        with transaction.atomic():
            BreakGlass.objects.filter(user=user).delete()
            user.set_unusable_password()
            user.save(update_fields=["password"])
            audited(user, tenant, password_sign_in=False)
        self.stdout.write(f"{username} can no longer sign in with a password.")


def audited(user, tenant, *, password_sign_in: bool) -> None:
    audit(
        actor=CLI,
        verb=Verb.OPERATOR_BREAK_GLASS,
        obj=user,
        object_type="user",
        tenant=tenant,
        after={"username": user.username, "password_sign_in": password_sign_in},
    )
