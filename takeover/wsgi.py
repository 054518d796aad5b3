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
from django.urls import get_resolver  # noqa: E402

# Django imports the URL conf, and with it every view module, at the first request. Done
# here, before gunicorn's worker freezes what is loaded (takeover/gunicorn_conf.py), those
# objects (about 110,000) are left out of the collector's full scans instead of being
# traversed by each of them, in the middle of whatever requests are in flight then.
get_resolver()._populate()

if settings.SECRET_KEY_GENERATED and not settings.DEBUG:
    # Every web process must sign sessions and CSRF tokens with one key that the deployer
    # chose and keeps; a key invented on this machine is neither.
    raise ImproperlyConfigured(
        "SECRET_KEY is not set. With DEBUG off the web application needs a SECRET_KEY from "
        "the environment (generate one with: python -c 'import secrets; "
        "print(secrets.token_urlsafe(50))')."
    )
