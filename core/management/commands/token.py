"""Token lifecycle from the command line: the platform operator's path, for any tenant."""

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from core.durations import parse_duration
from core.errors import DomainError
from core.models import ApiToken, Principal, Tenant
from core.services import (
    operator_manageable,
    token_issue,
    token_revoke,
    token_rotate,
    tokens_manageable,
)

from .create_tenant import CLI


def duration(text):
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


class Command(BaseCommand):
    help = (
        "API tokens: `token list --tenant T`, `token create --tenant T (--principal P | "
        "--operator U) [--name N] [--expires-in 90d]`, `token revoke --tenant T ID`, "
        "`token rotate --tenant T ID [--expires-in 90d] [--overlap 1h]`. A new token is "
        "printed once, alone on the last line."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        listing = sub.add_parser("list")
        listing.add_argument("--tenant", required=True)
        create = sub.add_parser("create")
        create.add_argument("--tenant", required=True)
        owner = create.add_mutually_exclusive_group(required=True)
        owner.add_argument("--principal")
        owner.add_argument("--operator")
        create.add_argument("--name", default="")
        create.add_argument("--expires-in", type=duration)
        revoke = sub.add_parser("revoke")
        revoke.add_argument("--tenant", required=True)
        revoke.add_argument("id")
        revoke.add_argument("--reason", default="")
        rotate = sub.add_parser("rotate")
        rotate.add_argument("--tenant", required=True)
        rotate.add_argument("id")
        rotate.add_argument("--expires-in", type=duration)
        rotate.add_argument("--overlap", type=duration)
        rotate.add_argument("--reason", default="")

    def handle(self, verb, tenant, **options):
        try:
            tenant = Tenant.objects.get(slug=tenant)
        except Tenant.DoesNotExist as exc:
            raise CommandError(f"No tenant {tenant!r}.") from exc
        try:
            getattr(self, f"do_{verb}")(tenant, **options)
        except DomainError as exc:
            raise CommandError(exc.detail) from exc

    def _token(self, tenant, pk) -> ApiToken:
        try:
            token = tokens_manageable(tenant).filter(pk=pk).first()
        except ValidationError as exc:  # a malformed UUID
            raise CommandError(f"No token {pk!r} in {tenant.slug}.") from exc
        if token is None:
            raise CommandError(f"No token {pk!r} in {tenant.slug}.")
        return token

    def do_list(self, tenant, **options):
        now = timezone.now()
        for t in tokens_manageable(tenant).order_by("-created_at"):
            owner = t.owner
            self.stdout.write(
                "\t".join(
                    [
                        str(t.pk),
                        t.label + "…",
                        f"{owner['kind']}:{owner['name']}",
                        t.state_at(now),
                        t.name or "-",
                        f"expires={t.expires_at.isoformat() if t.expires_at else 'never'}",
                        f"last_used={t.last_used_at.isoformat() if t.last_used_at else 'never'}",
                    ]
                )
            )

    def do_create(self, tenant, principal, operator, name, expires_in, **options):
        owner = {}
        if principal:
            owner["principal"] = Principal.objects.filter(tenant=tenant, name=principal).first()
            if owner["principal"] is None:
                raise CommandError(f"No principal {principal!r} in {tenant.slug}.")
        else:
            user = get_user_model().objects.filter(username=operator).first()
            if user is None or not operator_manageable(tenant, user):
                raise CommandError(f"No operator {operator!r} in {tenant.slug}.")
            owner["user"] = user
        expires_at = timezone.now() + expires_in if expires_in else None
        token, raw = token_issue(
            tenant=tenant, actor=CLI, name=name, expires_at=expires_at, **owner
        )
        self.stderr.write(f"token {token.pk} ({token.label}…), shown once:")
        self.stdout.write(raw)

    def do_revoke(self, tenant, id, reason, **options):
        token = token_revoke(self._token(tenant, id), tenant=tenant, actor=CLI, reason=reason)
        self.stdout.write(f"revoked {token.pk} ({token.label}…)")

    def do_rotate(self, tenant, id, expires_in, overlap, reason, **options):
        extra = {"expires_at": timezone.now() + expires_in} if expires_in else {}
        new, raw = token_rotate(
            self._token(tenant, id),
            tenant=tenant,
            actor=CLI,
            overlap_seconds=overlap.total_seconds() if overlap else 0,
            reason=reason,
            **extra,
        )
        self.stderr.write(f"token {id} rotated; new token {new.pk} ({new.label}…), shown once:")
        self.stdout.write(raw)
