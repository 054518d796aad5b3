"""Console sign-in, throttled (django-axes) and with a bounded cost.

- **Lockout, per account and address first.** After AXES_FAILURE_LIMIT wrong passwords for
  one account from one address, further attempts for that account *from that address* are
  refused for AXES_COOLOFF_TIME, even with the right password, with a clear message (HTTP
  429); its owner still signs in from their own address, so nobody can lock a named person
  out by guessing their password. The lockout is written to the audit log of every tenant
  the account belongs to.
- **Per address, across accounts.** After SIGNIN_ADDRESS_FAILURE_LIMIT wrong passwords from
  one address, whatever the accounts (password spraying), that address is refused for
  AXES_COOLOFF_TIME. The trade-off: people behind one shared address (an office NAT) share
  this budget, so it is larger than the per-account one; and a guesser spread over many
  addresses is slowed by the flood limit below, not by locking the account. Behind a proxy,
  set FORWARDED_PROXIES, or every sign-in comes from the proxy's address.
- **Cheap refusals.** A locked-out attempt is refused before any password is hashed (one
  indexed query); so is an attempt that finds every hashing slot busy.
- **Bounded hashing.** A password check costs hundreds of milliseconds of CPU (PBKDF2, by
  design). At most SIGNIN_CONCURRENCY run at once per web process; a sign-in that finds
  them all busy is answered at once with a 503 "try again", instead of queueing web threads
  behind the hasher. A flood of the login page therefore costs at most that many cores,
  and the agents' API keeps the rest.
"""

import threading

from axes.backends import AxesStandaloneBackend
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_credentials
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Sum
from django.dispatch import receiver
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from core.access import console_viewer

from .timezones import remember_on_sign_in

_slots = threading.BoundedSemaphore(getattr(settings, "SIGNIN_CONCURRENCY", 1))

LOCKED_OUT = (
    "Too many failed sign-ins from this address. Sign-in is locked here for {minutes} "
    "minutes; ask an admin if you need in sooner."
)
BUSY = "Sign-in is busy right now. Try again in a few seconds."


def _minutes() -> int:
    return max(1, int(settings.AXES_COOLOFF_TIME.total_seconds() // 60))


def _page(request, message: str, status: int):
    # Unbound: binding it would validate, and validating would hash the password.
    form = AuthenticationForm(request, initial={"username": request.POST.get("username", "")})
    return render(
        request,
        "console/login.html",
        {"form": form, "next": request.POST.get("next", ""), "signin_refused": message},
        status=status,
    )


class ThrottledBackend(AxesStandaloneBackend):
    """Axes' lockout check, first in AUTHENTICATION_BACKENDS. An authenticate() call without
    a request (a script, the test client's login()) is not an HTTP sign-in: there is no
    address to throttle, so it is left to the next backend instead of refused."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


def address_locked(request) -> bool:
    """SIGNIN_ADDRESS_FAILURE_LIMIT wrong passwords from this address within the cool-off,
    whatever the accounts (one indexed query: axes keeps a row per account and address)."""
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    failures = AccessAttempt.objects.filter(
        ip_address=request.axes_ip_address, attempt_time__gte=since
    ).aggregate(n=Sum("failures_since_start"))["n"]
    return (failures or 0) >= settings.SIGNIN_ADDRESS_FAILURE_LIMIT


def locked_out(request, original_response=None, credentials=None):
    """AXES_LOCKOUT_CALLABLE: the sign-in page again, with the reason, as a 429."""
    response = _page(request, LOCKED_OUT.format(minutes=_minutes()), 429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response


class LoginView(auth_views.LoginView):
    template_name = "console/login.html"
    redirect_authenticated_user = True

    def form_valid(self, form):
        response = super().form_valid(form)
        remember_on_sign_in(self.request, form.get_user())
        return response

    def get_default_redirect_url(self):
        """Approvers who are not on-call land on Approvals, the page they can act on."""
        scope = console_viewer(self.request.user, self.request.session)
        if scope and scope.is_approver and not scope.is_oncall:
            return reverse("console:approvals")
        return super().get_default_redirect_url()

    def post(self, request, *args, **kwargs):
        credentials = get_credentials(request.POST.get("username", ""))
        if AxesProxyHandler.is_locked(request, credentials) or address_locked(request):
            return locked_out(request)
        if not _slots.acquire(blocking=False):
            response = _page(request, BUSY, 503)
            response["Retry-After"] = "2"
            return response
        try:
            return super().post(request, *args, **kwargs)
        finally:
            _slots.release()


@receiver(user_locked_out, dispatch_uid="takeover.audit_lockout")
def audit_lockout(sender, request, username, ip_address, **kwargs):
    """The lockout, in the audit log of each tenant the account belongs to (an unknown
    username has no tenant; axes' own tables record it)."""
    from core.audit import SYSTEM, Verb, audit
    from core.models import Membership

    user = get_user_model().objects.filter(username=username).first() if username else None
    if user is None:
        return
    for membership in Membership.objects.filter(user=user).select_related("tenant"):
        audit(
            actor=SYSTEM,
            verb=Verb.OPERATOR_LOCKED_OUT,
            obj=user,
            object_type="user",
            tenant=membership.tenant,
            after={"username": username, "ip_address": ip_address},
            reason=f"{settings.AXES_FAILURE_LIMIT} failed sign-ins",
        )
