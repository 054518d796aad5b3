"""Run by test_pgbouncer.py in a process whose DATABASE_URL points at PgBouncer: GET /readyz
through the whole middleware stack, printed as JSON."""

import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.test import Client  # noqa: E402

response = Client().get("/readyz")
print(json.dumps({"status": response.status_code, "body": response.json()}))
