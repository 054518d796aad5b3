"""Who signs in how (console/sso.py): an operator from the identity provider, and the
emergency admin who may still use a password while single sign-on is on."""

from django.conf import settings
from django.db import models


class SsoIdentity(models.Model):
    """An operator account that belongs to an identity provider's subject, for good: the
    provider's `sub` (never its e-mail or user name, which can be reassigned) finds it at
    every sign-in."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_account_per_subject")
        ]


class BreakGlass(models.Model):
    """An account that may sign in with a password while single sign-on is on: the
    emergency admin for a day the identity provider is down. Set from the command line only
    (`manage.py break_glass`), audited."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="break_glass"
    )
    created_at = models.DateTimeField(auto_now_add=True)
