import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "takeover.settings")

from takeover.embedded_db import prepare

prepare()

from core.otel import setup as tracing  # noqa: E402 -- the settings module must be named first

tracing("takeover-web")  # before the middleware is built; off unless configured
application = get_wsgi_application()
