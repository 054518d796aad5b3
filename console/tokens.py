"""The console's API-token page: every operator issues, rotates and revokes their own
tokens; an admin also sees the tenant's, issues principals' tokens, and revokes (never
receives) other people's. Self-contained (its own view, form and template) and calling the
same services as the API and `manage.py token`, which hold the rule
(`core.services.check_token_issue`).

A new token is shown once, in the answer to the POST that made it (a 200, not a redirect):
putting it in a flash message would store the secret in the session or a cookie.
"""

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.db.models import Q
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from core.errors import DomainError
from core.models import Principal
from core.services import (
    token_issue,
    token_revoke,
    token_rotate,
    tokens_manageable,
)

from .web import decision, operator_required

LIFETIMES = [
    ("", "Never expires"),
    ("30", "30 days"),
    ("90", "90 days"),
    ("365", "1 year"),
]
OVERLAPS = [
    ("0", "old one stops now"),
    ("3600", "old one works 1 more hour"),
    ("86400", "old one works 1 more day"),
]


class IssueForm(forms.Form):
    owner = forms.ChoiceField(label="For")
    name = forms.CharField(label="Purpose", max_length=100, required=False, strip=True)
    lifetime = forms.ChoiceField(label="Expires", choices=LIFETIMES, required=False)

    def __init__(self, data=None, *, owners):
        super().__init__(data)
        self.fields["owner"].choices = owners


class RotateForm(forms.Form):
    overlap = forms.ChoiceField(choices=OVERLAPS, required=False)


class RevokeForm(forms.Form):
    reason = forms.CharField(max_length=2000, required=False, strip=True)


def _owners(scope) -> list[tuple[str, str]]:
    """Whom the signed-in operator may issue a token for: themselves, and (admin) the
    tenant's principals. Never another person."""
    choices = [(f"operator:{scope.user.get_username()}", "yourself")]
    if scope.is_admin:
        principals = Principal.objects.filter(tenant=scope.tenant).order_by("name")
        choices += [(f"principal:{p.name}", f"principal {p.name}") for p in principals]
    return choices


def _visible(scope):
    return tokens_manageable(scope.tenant, scope.user, own=not scope.is_admin)


def _page(request, *, form=None, new_token=None, status=200):
    scope = request.scope
    now = timezone.now()
    state = request.GET.get("state", "active")
    qs = _visible(scope).order_by("-created_at")
    if state == "active":
        qs = qs.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )
    rows = list(qs[:200])
    for token in rows:
        token.state = token.state_at(now)
        token.yours = token.user_id == scope.user.pk
    return render(
        request,
        "console/tokens.html",
        {
            "section": "tokens",
            "rows": rows,
            "show_all": state != "active",
            "form": form or IssueForm(owners=_owners(scope)),
            "overlaps": OVERLAPS,
            "new_token": new_token,
        },
        status=status,
    )


@operator_required()
def tokens(request):
    return _page(request)


@decision(back=lambda _: reverse("console:tokens"), refused="Not issued")
def token_issue_view(request):
    scope = request.scope
    form = IssueForm(request.POST, owners=_owners(scope))
    if not form.is_valid():
        return _page(request, form=form, status=422)
    kind, _, name = form.cleaned_data["owner"].partition(":")
    if kind == "principal":
        owner = {"principal": Principal.objects.get(tenant=scope.tenant, name=name)}
    else:
        owner = {"user": scope.user}
    days = form.cleaned_data["lifetime"]
    token, raw = token_issue(
        tenant=scope.tenant,
        actor=scope.actor,
        name=form.cleaned_data["name"],
        expires_at=timezone.now() + timedelta(days=int(days)) if days else None,
        **owner,
    )
    return _page(request, new_token={"token": token, "raw": raw, "verb": "issued"})


def _token_for(scope, pk):
    token = _visible(scope).filter(pk=pk).first()
    if token is None:
        raise Http404
    return token


@decision(_token_for, back=lambda _: reverse("console:tokens"), refused="Not revoked")
def token_revoke_view(request, token):
    form = RevokeForm(request.POST)
    form.is_valid()
    try:
        token_revoke(
            token,
            tenant=request.scope.tenant,
            actor=request.scope.actor,
            reason=form.cleaned_data.get("reason", ""),
        )
    except DomainError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"Token {token.label}… revoked.")
    return _back()


@decision(_token_for, back=lambda _: reverse("console:tokens"), refused="Not rotated")
def token_rotate_view(request, token):
    form = RotateForm(request.POST)
    overlap = float(form.cleaned_data.get("overlap") or 0) if form.is_valid() else 0
    try:
        new, raw = token_rotate(
            token, tenant=request.scope.tenant, actor=request.scope.actor, overlap_seconds=overlap
        )
    except DomainError as exc:
        messages.error(request, exc.detail)
        return _back()
    if raw is None:  # another person's token: revoked, and only they may issue its successor
        messages.success(
            request, f"Token {token.label}… revoked; only its owner can issue a successor."
        )
        return _back()
    return _page(request, new_token={"token": new, "raw": raw, "verb": "rotated", "old": token})


def _back():
    response = HttpResponseRedirect(reverse("console:tokens"))
    response.status_code = 303
    return response
