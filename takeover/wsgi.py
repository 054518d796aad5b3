import os

from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "takeover.settings")

from takeover.embedded_db import prepare

prepare()

from core.otel import setup as tracing  # noqa: E402 -- the settings module must be named first

tracing("takeover-web")  # before the middleware is built; off unless configured
application = get_wsgi_application()

from django.conf import settings  # noqa: E402 -- configured by the line above

if settings.SECRET_KEY_GENERATED and not settings.DEBUG:
    # Every web process must sign sessions and CSRF tokens with one key that the deployer
    # chose and keeps; a key invented on this machine is neither.
    raise ImproperlyConfigured(
        "SECRET_KEY is not set. With DEBUG off the web application needs a SECRET_KEY from "
        "the environment (generate one with: python -c 'import secrets; "
        "print(secrets.token_urlsafe(50))')."
    )
