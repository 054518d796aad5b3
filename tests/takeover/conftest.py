"""The takeover tests' shared pieces: the web tier as the README starts it (one per session),
and the JSON access log."""

import io
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import time

import pytest

from core.logs import ContextFilter, json_formatter
from tests.conftest import ROOT, database_url, free_port

WEB_SECRET = secrets.token_urlsafe(50)
METRICS_TOKEN = "test-metrics-token"  # tests/settings.py


class Server:
    """gunicorn as the README starts it (`-c python:takeover.gunicorn_conf`, gthread, the
    control socket off), on a free port and the test database, its output in a file."""

    def __init__(self, env, *, workers=2, threads=8, log_path=None, args=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        # The environment a deployment has: nothing about metrics directories (the gunicorn
        # configuration makes its own).
        base = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        output = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                *("-m", "gunicorn", "-c", "python:takeover.gunicorn_conf", "takeover.wsgi"),
                *("-b", f"127.0.0.1:{self.port}", "-k", "gthread"),
                *("--threads", str(threads), "-w", str(workers), "--no-control-socket"),
                *args,
            ],
            cwd=ROOT,
            env={
                **base,
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "DATABASE_URL": database_url(),
                "SECRET_KEY": WEB_SECRET,
                "DEBUG": "0",
                **env,
            },
            stdout=output,
            stderr=subprocess.STDOUT if log_path else subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(self.log()[-3000:]) from None
                time.sleep(0.1)

    def log(self) -> str:
        if self.log_path:
            return self.log_path.read_text(errors="replace")
        return self.process.stderr.read().decode() if self.process.poll() is not None else ""

    def worker_pids(self) -> list[int]:
        from takeover.supervisor import descendants

        return descendants(self.process.pid)

    def stop(self):
        self.process.terminate()
        self.process.wait(15)

    def raw(self, data: bytes) -> tuple[int, dict, bytes]:
        """Send bytes as they are; (status, headers, body) of the answer."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
            s.sendall(data)
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        lines = head.decode("latin1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        return int(lines[0].split()[1]), headers, body


@pytest.fixture(scope="session")
def web(django_db_setup, tmp_path_factory):
    """The web tier of the README, one per session: 2 processes × 8 threads, JSON logs, the
    access log on."""
    s = Server(
        {"LOG_FORMAT": "json"},
        log_path=tmp_path_factory.mktemp("web") / "web.log",
        args=("--access-logfile", "-"),
    )
    yield s
    s.stop()


@pytest.fixture
def json_log():
    """The access log as LOG_FORMAT=json writes it (same formatter, same filter)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("takeover.access")
    logger.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
