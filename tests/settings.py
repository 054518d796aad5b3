"""Test settings: the project's own, with a private broker directory and quicker clocks.

Set through the environment (before takeover.settings is read), so that the Celery worker
processes the tests start inherit exactly the same configuration.
"""

import os
import tempfile

# Under pytest-xdist each test process has its own database (test_takeover_gw0, ...), so it
# needs its own broker, mailbox and input storage too: the ones it inherits are the
# controller's, shared.
# Once per test process: the Celery workers it starts inherit its environment, and its dirs.
_process = os.environ.get("PYTEST_XDIST_WORKER")
if _process and os.environ.get("TAKEOVER_TEST_DIRS_OF") != _process:
    os.environ["TAKEOVER_TEST_DIRS_OF"] = _process
    os.environ["CELERY_BROKER_DIR"] = tempfile.mkdtemp(prefix=f"takeover-test-broker-{_process}-")
    os.environ["EMAIL_FILE_PATH"] = tempfile.mkdtemp(prefix=f"takeover-test-mail-{_process}-")
    # Tests count the stored input files: another process's uploads must not be counted.
    os.environ["INPUT_STORAGE_DIR"] = tempfile.mkdtemp(prefix=f"takeover-test-inputs-{_process}-")
os.environ.setdefault("CELERY_BROKER_DIR", tempfile.mkdtemp(prefix="takeover-test-broker-"))
# Longer than the refusal window the safe-retry test opens, so the retry lands after it.
os.environ.setdefault("SAFE_RETRY_DELAY_SECONDS", "3")
os.environ.setdefault("DISPATCH_LEASE_GRACE_SECONDS", "3")
os.environ.setdefault("RECONCILE_LEASE_GRACE_SECONDS", "3")
os.environ.setdefault("SWEEP_INTERVAL_SECONDS", "1")
# Resends to idempotent tools after half a second, not five.
os.environ.setdefault("IDEMPOTENT_RESEND_DELAY_SECONDS", "0.5")
# The test process and its workers name different databases (takeover / test_takeover), so
# the per-deployment default queue would differ between them: name it.
os.environ.setdefault("CELERY_QUEUE", "takeover-tests")
os.environ.setdefault("METRICS_TOKEN", "test-metrics-token")
# The console's background re-read on opening an action adds reads the tests do not expect
# (its own test turns it on).
os.environ.setdefault("CONSOLE_REREAD_AFTER_SECONDS", "3600")
# Notifications: retries 1 s, then 2 s apart, three attempts in all, so that the tests see
# a retry and a give-up in seconds. The workers write e-mail to files (pytest-django gives
# this process the in-memory backend).
os.environ.setdefault("NOTIFY_BACKOFF_BASE_SECONDS", "1")
os.environ.setdefault("NOTIFY_MAX_ATTEMPTS", "3")
os.environ.setdefault("NOTIFY_TIMEOUT_SECONDS", "2")
os.environ.setdefault("NOTIFY_LEASE_GRACE_SECONDS", "3")
os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
os.environ.setdefault("EMAIL_FILE_PATH", tempfile.mkdtemp(prefix="takeover-test-mail-"))
# Narrower than the default (all of 127.0.0.0/8): the egress tests serve a tool on 127.0.0.2,
# which the workers must then refuse (tests/core/test_egress.py).
os.environ.setdefault("TOOL_URL_ALLOWLIST", "localhost,127.0.0.1/32,::1")

# The tests are an entry point of their own: start the embedded PostgreSQL (when DATABASE_URL
# is unset) before the project's settings read its URL.
from takeover.embedded_db import prepare  # noqa: E402

prepare(stop_at_exit=True)  # and stop it when the run ends, if this run started it

from takeover.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast sign-ins in tests
