import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from core.otel import setup as tracing  # the settings module must be named first

tracing("takeover-web")  # before the middleware is built; off unless configured
application = get_wsgi_application()
